"""`dlperf.serve`: a decoder LLM served with a KV cache, predicted."""

from __future__ import annotations

import math

from ..dtypes import bytes_per_element
from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..hardware import gpu as get_gpu
from ..run import Run, Session, resolve
from ..tracing import repeated_blocks
from .cache import check_decoder
from .memory import ServingMemory, activation_bytes, kv_bytes_per_token, max_batch, workspace_bytes
from .quant import kv_dtype_for, scheme_for, weight_bytes
from .result import (
    PhaseReport,
    ServeReport,
    bound_of,
    linear_flops,
    linear_rows,
    linear_share,
    math_bound_from,
    top_ops,
    weight_bytes_read,
)
from .steps import SAMPLERS, Engine, StepTracer
from .timeline import Timeline, check_lengths, mean_decode_s


def serve(
    model,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "fp16",
    input_len: int = 128,
    output_len: int = 128,
    batch: int = 1,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: str | None = None,
    concurrency: int | None = None,
    cuda_graphs: bool = False,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
    fused: bool = True,
    must_fit: bool = True,
    session: Session | None = None,
    attention: str = "auto",
    quant_group: int | None = None,
    sampling: str = "greedy",
) -> ServeReport:
    """Predict serving a decoder LLM (`hf:llama-7b`, a model file whose forward
    takes `past_key_values`, ...) on `tp` x `pp` GPUs: time to first token,
    time per output token, request latency, tokens/s, memory per GPU and the
    largest batch whose KV caches fit.

    `precision`: fp16, bf16, fp8, int8 (W8A8), int8-weight, int4-weight
    (`serving.quant`); `kv_cache_dtype`: fp16, bf16, fp8, int8 (default the
    precision's base dtype). `batch` requests of `input_len` prompt tokens
    each generate `output_len` tokens as one static batch; `concurrency` also
    prices in-flight batching with that many requests in flight. The engine
    runs fused kernels (`fused`), launches each kernel from C++ (no framework
    overhead), and replays CUDA graphs with `cuda_graphs`. A batch that does
    not fit is refused unless `must_fit` is false (then `fits` says so).
    `attention` is the attention kernel as for `dlperf.analyze` ("math": an
    engine that computes attention with batched GEMMs and a softmax kernel).
    `quant_group` is the weights per scale of int8-weight and int4-weight
    (default 128; tinygemm's int4 runs 32). `sampling` is "greedy" (one argmax
    per row, as serving benchmarks decode) or "top-p" (vLLM's sort-based sampler).
    """
    check_lengths(input_len, output_len, batch, concurrency)
    _check_counts(tp, pp, gpus_per_node)
    if isinstance(model, Run):  # its model and GPU; serving sets the rest
        model, gpu = model.model, model.spec
    spec = get_gpu(gpu)
    scheme = scheme_for(precision, spec, quant_group)
    kv_dtype = kv_dtype_for(kv_cache_dtype, scheme)
    run = resolve(
        model,
        gpu=spec,
        precision=scheme.base,
        training=False,
        batch=1,
        seq_len=1,
        attention=attention,
    )
    check_decoder(run.model)
    blocks = repeated_blocks(run.module)
    if pp > max(1, len(blocks)):
        raise DlperfError(f"--pp {pp} is more stages than the model's {len(blocks)} layers")
    if sampling not in SAMPLERS:
        raise DlperfError(f"unknown sampling {sampling!r}; choose from: {', '.join(SAMPLERS)}")
    engine = Engine(
        spec, scheme, kv_dtype, tp, fused, gpus_per_node, node_network_bytes_per_s, sampling
    )
    tracer = StepTracer(run, engine, session or Session())
    timeline = Timeline(tracer, input_len, output_len, pp, cuda_graphs)
    prefill, prefill_t = timeline.prefill(batch)
    memory, per_sequence = _memory(run, prefill, scheme, engine, pp, input_len + output_len)
    gpus_memory = _with_batch(memory, per_sequence, batch, prefill.batch)
    largest = max_batch(spec, memory.weights_bytes, memory.workspace_bytes, per_sequence)
    fits = gpus_memory.total_bytes <= spec.memory_bytes
    if must_fit and not fits:
        raise DlperfError(_no_fit(run.name, spec, gpus_memory, largest, batch, tp))
    decoded, points = timeline.decode(batch)
    report = _report(run, spec, scheme, kv_dtype, (batch, input_len, output_len, tp, pp))
    times = [t["time_s"] for _, t in decoded]
    _request_times(report, prefill_t["time_s"], mean_decode_s(points, times, input_len, output_len))
    report.memory, report.fits, report.max_batch = gpus_memory.to_dict(), fits, largest
    kv_bytes = bytes_per_element(kv_dtype)
    report.kv_cache_bytes_per_token = kv_bytes_per_token(prefill.kv_shapes, kv_bytes)
    report.kv_cache_bytes_per_token_per_gpu = kv_bytes_per_token(
        prefill.kv_shapes, kv_bytes, tp, pp
    )
    middle, middle_t = decoded[len(decoded) // 2]
    report.prefill = _phase(prefill, prefill_t, scheme)
    report.decode = _phase(middle, {**middle_t, "time_s": report.tpot_s}, scheme)
    report.decode.extra.update(cached_tokens=points, step_s=times)
    report.cuda_graphs = cuda_graphs
    report.unsupported_ops = {**prefill.unsupported, **middle.unsupported}
    _bound_notes(report, middle, spec, scheme)
    if concurrency:
        report.concurrency = _in_flight(timeline, concurrency)
    return report


def _request_times(report: ServeReport, ttft_s: float, tpot_s: float) -> None:
    """A request's latency and the deployment's throughput from TTFT and TPOT."""
    report.ttft_s, report.tpot_s = ttft_s, tpot_s
    report.latency_s = ttft_s + (report.output_len - 1) * tpot_s
    report.output_tokens_per_s = report.batch * report.output_len / report.latency_s
    report.output_tokens_per_s_per_gpu = report.output_tokens_per_s / (report.tp * report.pp)


def _check_counts(tp: int, pp: int, gpus_per_node: int) -> None:
    for name, value in (("--tp", tp), ("--pp", pp), ("--gpus-per-node", gpus_per_node)):
        if not isinstance(value, int) or value <= 0:
            raise DlperfError(f"{name} must be a positive whole number, not {value!r}")


def _report(run, spec, scheme, kv_dtype: str, sizes: tuple) -> ServeReport:
    """The report's identity; its figures are filled in by `serve`."""
    batch, input_len, output_len, tp, pp = sizes
    return ServeReport(
        run.name, spec.id, scheme.name, kv_dtype, batch, input_len, output_len, tp, pp,
        ttft_s=0.0, tpot_s=0.0, latency_s=0.0, output_tokens_per_s=0.0,
        output_tokens_per_s_per_gpu=0.0, memory={}, kv_cache_bytes_per_token=0.0,
        kv_cache_bytes_per_token_per_gpu=0.0, fits=True, max_batch=0,
        prefill=None, decode=None,
    )  # fmt: skip


def _memory(run, prefill, scheme, engine, pp: int, tokens: int):
    """(memory per GPU at the traced prefill's batch, bytes per extra sequence)."""
    blocks = repeated_blocks(run.module)
    weights = weight_bytes(run.module, blocks, scheme) / (engine.tp * pp)
    per_token = kv_bytes_per_token(
        prefill.kv_shapes, bytes_per_element(engine.kv_dtype), engine.tp, pp
    )
    residual = _residual_bytes(prefill)
    activations = activation_bytes(prefill.activation_bytes, residual)
    per_sequence = per_token * tokens + activations / prefill.batch
    memory = ServingMemory(weights, per_token * tokens * prefill.batch, activations, 0.0)
    memory.workspace_bytes = workspace_bytes(engine.spec)
    return memory, per_sequence


def _residual_bytes(step) -> float:
    for r in step.rows:
        if r.op.startswith("aten.embedding") and r.shapes:
            return float(step.batch * step.new_tokens * r.shapes[0][-1] * 2)
    return 0.0


def _with_batch(memory: ServingMemory, per_sequence: float, batch: int, traced: int):
    """The memory at `batch` sequences, from the one traced at `traced`."""
    kv_per_sequence = memory.kv_cache_bytes / traced
    act_per_sequence = per_sequence - kv_per_sequence
    return ServingMemory(
        memory.weights_bytes,
        kv_per_sequence * batch,
        act_per_sequence * batch,
        memory.workspace_bytes,
    )


def _no_fit(name, spec, memory: ServingMemory, largest: int, batch: int, tp: int) -> str:
    gb = 1e9
    if largest == 0:
        more = tp * 2  # the fewest GPUs (doubling) whose weight shares leave room
        while memory.weights_bytes * tp / more + memory.workspace_bytes >= spec.memory_bytes:
            more *= 2
        return (
            f"{name}'s weights ({memory.weights_bytes / gb:.1f} GB per GPU) leave no room for "
            f"a KV cache on {spec.id} ({spec.memory_bytes / gb:.1f} GB); use --tp {more} "
            "or a smaller --precision (int8-weight, int4-weight)"
        )
    return (
        f"batch {batch} does not fit on {spec.id}: {memory.total_bytes / gb:.1f} GB per GPU "
        f"(KV cache {memory.kv_cache_bytes / gb:.1f} GB) > {spec.memory_bytes / gb:.1f} GB; "
        f"the largest batch that fits is {largest} (or add --tp, --kv-cache-dtype fp8)"
    )


def _phase(step, timing: dict, scheme) -> PhaseReport:
    rows = step.rows
    return PhaseReport(
        time_s=timing["time_s"],
        tokens=step.batch * step.new_tokens,
        flops=float(sum(r.flops for r in rows)),
        bytes=float(sum(r.bytes for r in rows if r.family != "collective")),
        weight_bytes=weight_bytes_read(rows, scheme),
        comm_s=timing["comm_s"],
        bound=bound_of([r for r in rows if r.family != "collective"]),
        top_ops=top_ops(rows, step.gpu_time_s),
        extra={
            "stage_s": timing["stage_s"],
            "micro_batch": step.batch,
            "linear_flops": linear_flops(rows),
            "linear_ops": len(linear_rows(rows)),
            "attention_flops": float(sum(r.flops for r in rows if r.family == "attention")),
            "collectives": [
                {"op": r.op, "module": r.module, "bytes": r.bytes, "time_s": r.time_s}
                for r in rows
                if r.family == "collective"
            ],
        },
    )


def _bound_notes(report: ServeReport, step, spec, scheme) -> None:
    share = linear_share(step.rows)
    turn = math_bound_from(step.rows, spec, scheme)
    reading = turn is None or step.batch < turn
    report.decode.extra["linear_layers_share"] = share
    report.decode.extra["math_bound_from_batch"] = turn
    where = f"from batch {turn}" if turn else "at no batch up to 16384"
    if reading and share >= 0.5:
        verdict = f"weight-read bound ({share:.0%} of a step in linear layers reading weights)"
    else:
        verdict = f"mostly {report.decode.bound}-bound (linear layers {share:.0%} of a step)"
    report.notes.append(
        f"decode at batch {report.batch} is {verdict}; its linear layers turn math-bound {where}"
    )


def _in_flight(timeline: Timeline, c: int) -> dict:
    """Steady state with `c` requests in flight: each iteration decodes all of
    them and runs the prompts of the c / O requests that start per iteration."""
    i, o = timeline.input_len, timeline.output_len
    mean_cached = i + max(0, o - 2) // 2
    ((step, timing),) = timeline.decode(c, [mean_cached])[0]
    starts = math.ceil(c / o)
    prompt, prompt_t = timeline.prefill(starts)
    per_prompt_token = prompt_t["time_s"] / (starts * i)
    iteration = timing["time_s"] + c * i / o * per_prompt_token
    return {
        "requests_in_flight": c,
        "iteration_s": iteration,
        "decode_step_s": timing["time_s"],
        "prompt_tokens_per_iteration": c * i / o,
        "ttft_s": iteration,
        "tpot_s": iteration,
        "latency_s": o * iteration,
        "output_tokens_per_s": c / iteration,
        "output_tokens_per_s_per_gpu": c / iteration / (timeline.tracer.engine.tp * timeline.pp),
    }
