"""Profiler traces written from a prediction with known constants, so that
`compare` and `calibrate --trace` can be checked against the truth.

Each predicted row becomes one call per step (its profiler name and input
shapes, as torch.profiler records them); on a GPU one kernel per call,
launched inside it, lasting `duration_us(row)`; on a CPU the call itself
lasts that long and the host waits `gap_us(row)` after it.
"""

from __future__ import annotations

import gzip
import json

from dlperf.measurement.trace_match import OPTIMIZER, trace_name

PROFILER_NAMES = {
    "dlperf::attention": "aten::scaled_dot_product_attention",
    "dlperf::attention_backward": "aten::_scaled_dot_product_flash_attention_backward",
}
# The optimizer phase's rows as torch.optim's multi-tensor ops name them
OPTIMIZER_NAMES = {
    "optimizer.adamw-fused": "aten::_fused_adamw_",
    "clip_grad_norm": "aten::_foreach_norm",
    "amp.grad_scaler": "aten::_amp_foreach_non_finite_check_and_unscale_",
}


def profiler_name(row) -> str:
    name = trace_name(row.op)
    if name == OPTIMIZER:  # another update: foreach Adam's moment update
        return OPTIMIZER_NAMES.get(row.op, "aten::_foreach_lerp_")
    return PROFILER_NAMES.get(name, name)


def write_trace(
    path,
    rows,
    duration_us,
    steps: int = 2,
    gpu: str | None = "NVIDIA A100-SXM4-80GB",
    gap_us=lambda row: 0.0,
    extra_kernels=(),
    rank: int | None = None,
    shapes: bool = True,
    marks: bool = True,
    nest: bool = False,
) -> None:
    """`extra_kernels`: (name, start offset in the step, duration[, args]) of
    kernels launched outside any model op (communication, say), per step, in
    microseconds; with `args`, from a `record_param_comms` call holding them.
    `shapes` and `marks`: record input shapes and ProfilerStep spans. `nest`
    (CPU): each call inside a wrapper call the model does not predict, and
    holding a nested call of its own, as the profiler's call tree has them."""
    events, corr, t = [], 0, 1000.0
    gpu_t = t
    for step in range(steps):
        step_start = t
        for row in rows:
            dur = duration_us(row)
            args = {"Input Dims": [list(s) for s in row.shapes], "Input type": []}
            if not shapes:
                args = {}
            if gpu:
                corr += 1
                launch = t + 1.0
                start = max(gpu_t, launch + 0.5)
                events.append(_cpu_op(profiler_name(row), t, 3.0, args))
                events.append(
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1,
                     "ts": launch, "dur": 1.0, "args": {"correlation": corr}}
                )  # fmt: skip
                events.append(
                    {"ph": "X", "cat": "kernel", "name": f"kernel_{row.op}", "tid": 7,
                     "ts": start, "dur": dur, "args": {"correlation": corr, "stream": 7}}
                )  # fmt: skip
                gpu_t = start + dur + gap_us(row)
                t += 4.0
            else:
                if nest:  # a wrapper starting with the op, and a call inside the op
                    events.append(_cpu_op("aten::wrapper_not_predicted", t, dur + 1.0, {}))
                    events.append(_cpu_op("aten::copy_", t + dur / 4, dur / 2, args))
                events.append(_cpu_op(profiler_name(row), t, dur, args))
                t += dur + (1.0 if nest else 0.0) + gap_us(row)
        for name, offset, dur, *op_args in extra_kernels:
            args = {"stream": 8}
            if op_args:  # launched inside a record_param_comms call with these args
                corr += 1
                args["correlation"] = corr
                events.append(_cpu_op("record_param_comms", step_start, 2.0, op_args[0]))
                events.append(
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1,
                     "ts": step_start + 0.5, "dur": 1.0, "args": {"correlation": corr}}
                )  # fmt: skip
            events.append(
                {"ph": "X", "cat": "kernel", "name": name, "tid": 8,
                 "ts": step_start + offset, "dur": dur, "args": args}
            )  # fmt: skip
        end = max(t, gpu_t) if gpu else t
        if marks:
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "tid": 1,
                 "ts": step_start, "dur": end - step_start, "args": {}}
            )  # fmt: skip
        t = gpu_t = end + 10.0
    doc = {"traceEvents": events}
    if gpu:
        doc["deviceProperties"] = [{"name": gpu}]
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    with gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w") as f:
        json.dump(doc, f)


def _cpu_op(name: str, ts: float, dur: float, args: dict) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "tid": 1, "ts": ts, "dur": dur, "args": args}
