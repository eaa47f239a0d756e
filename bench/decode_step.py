"""A Llama-2-7B decode step at batch 1, taken apart: weights at a stated share of
bandwidth, the fixed cost of its kernels back to back, the collectives.

The step is `dlperf serve hf:llama-7b --gpu a100 --precision bf16 --batch 1
--cuda-graphs` (128 prompt tokens, the step at a 128-token cache) at TP 1, 2, 4
and 8. Columns: the decode step as priced (the issue timeline: kernels back to
back in a CUDA graph); the linear layers' weight bytes per GPU and their time
at the GEMM model's DRAM rate (`dram_efficiency` of the datasheet bandwidth);
the kernels of the step, their fixed device time (`kernel_latency_s` for a
GEMM, `streaming_latency_s` for a memory-bound kernel) and the gaps between
them (`graph_gap_s` each, `kernels.fixed_costs`); the all-reduces; the rest
(attention over the cache, the small kernels' bytes, the GEMMs' fixed tile
cycles). One layer's kernels are listed by op.

Run: python bench/decode_step.py
"""

from __future__ import annotations

from collections import Counter

import dlperf
from dlperf.kernels.fixed_costs import gap_s, streaming_latency_s
from dlperf.run import Session, resolve
from dlperf.serving.quant import kv_dtype_for, scheme_for
from dlperf.serving.steps import Engine, StepTracer
from dlperf.serving.timeline import Timeline

MODEL, GPU, INPUT, OUTPUT = "hf:llama-7b", "a100-sxm4-80gb", 128, 2


def decode_rows(tp: int):
    spec = dlperf.gpu(GPU)
    scheme = scheme_for("bf16", spec)
    run = resolve(MODEL, gpu=spec, precision="bf16", training=False, batch=1, seq_len=1)
    engine = Engine(spec, scheme, kv_dtype_for(None, scheme), tp, True, 8, None)
    timeline = Timeline(StepTracer(run, engine, Session()), INPUT, OUTPUT, 1, True)
    (step, priced), *_ = timeline.decode(1)[0]
    return spec, step, priced


def main() -> int:
    print(
        "| TP | decode step ms | weights GB/GPU | at dram_efficiency ms | kernels | "
        "fixed device time ms | gaps ms | all-reduces ms | rest ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    layer = None
    for tp in (1, 2, 4, 8):
        spec, step, priced = decode_rows(tp)
        eff = spec.efficiency
        weights = sum(
            g.k * g.n * g.count * g.batch * 2
            for r in step.rows
            if getattr(r, "weight_gemms", ())
            for g in r.weight_gemms
        )
        weight_s = weights / (spec.memory_bandwidth_bytes_per_s * eff.dram_efficiency)
        kernels = sum(max(1, int(r.kernels)) for r in step.rows)
        gemm_kernels = sum(max(1, int(r.kernels)) for r in step.rows if r.gemms)
        comm_rows = [r for r in step.rows if r.family == "collective"]
        streaming = kernels - gemm_kernels - len(comm_rows)
        fixed_s = gemm_kernels * eff.kernel_latency_s + streaming * streaming_latency_s(spec)
        gaps_s = (kernels - 1) * gap_s(spec, cuda_graphs=True)
        comm_s = sum(r.time_s for r in comm_rows)
        total = priced["time_s"]
        rest = total - weight_s - fixed_s - gaps_s - comm_s
        print(
            f"| {tp} | {total * 1e3:.2f} | {weights / 1e9:.2f} | {weight_s * 1e3:.2f} | {kernels} "
            f"| {fixed_s * 1e3:.2f} | {gaps_s * 1e3:.2f} | {comm_s * 1e3:.2f} | {rest * 1e3:.2f} |"
        )
        if tp == 1:
            layer = Counter()
            for r in step.rows:
                if ".layers.0." in r.module:
                    layer[r.op.replace("aten.", "").replace(".default", "")] += max(1, r.kernels)
    count = sum(layer.values())
    print(f"\nOne layer at TP 1: {count} kernels:")
    print(", ".join(f"{op} {n}" for op, n in layer.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
