"""`dlperf.serve`: a decoder LLM served with a KV cache, predicted."""

from __future__ import annotations

import dataclasses
import math

from ..errors import DlperfError
from ..kernels.energy import rows_joules
from ..run import Session, run_config
from ..run_config import RunConfig
from .deployment import deploy
from .memory import ServingMemory, cached_tokens, max_batch
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
from .speculative import parse_speculative, what_if
from .timeline import Timeline, check_lengths, mean_decode_s


def serve(model, config: RunConfig | None = None, *, session: Session | None = None,
          fused: bool = True, must_fit: bool = True, **options) -> ServeReport:  # fmt: skip
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
    Memory as vLLM plans it (`serving.memory`): the engine takes
    `gpu_memory_utilization` of each card, reserves activations for one step
    of `max_num_batched_tokens` tokens (default vLLM's server's for the GPU)
    and holds the KV cache in blocks of `block_size` tokens. `speculative`
    (vLLM's --speculative-config JSON, `serving.speculative`) adds the
    speculative-decoding what-if of the middle decode step.
    """
    config = run_config(None, config, **options).check("serve")
    serving = config.serving
    batch = config.model.batch or 1
    input_len, output_len = serving.input_len or 128, serving.output_len or 128
    sizes = (batch, input_len, output_len, config.parallel.tp or 1, config.parallel.pp or 1)
    check_lengths(input_len, output_len, batch, serving.concurrency)
    speculation = parse_speculative(serving.speculative) if serving.speculative else None
    deployment = deploy(model, config, session, fused)
    deployment.check_request(input_len + output_len)
    timeline = deployment.timeline(input_len, output_len)
    prefill = timeline.prefill(batch)
    report = _report(deployment.run, deployment.spec, deployment.scheme,
                     deployment.engine.kv_dtype, sizes)  # fmt: skip
    _memory(report, deployment, prefill[0], sizes, serving.block_size, must_fit)
    decoded, points = timeline.decode(batch)
    middle_s = _phases(report, deployment, prefill, (decoded, points))
    report.cuda_graphs = config.step.cuda_graphs
    if serving.concurrency:
        report.concurrency = _in_flight(timeline, serving.concurrency)
    if speculation:
        cached = points[len(points) // 2]
        report.speculative = _speculate(speculation, timeline, (config, session), batch,
                                        cached, middle_s)  # fmt: skip
    return report


def _memory(report: ServeReport, deployment, prefill, sizes: tuple, block_size: int,
            must_fit: bool) -> None:  # fmt: skip
    """Memory per GPU at the batch, and the largest batch whose KV caches fit;
    a batch that does not fit is refused when it must."""
    batch, input_len, output_len, tp, _ = sizes
    fixed, per_sequence = deployment.memory(prefill)
    per_sequence *= cached_tokens(input_len + output_len, block_size)
    gpus_memory = dataclasses.replace(fixed, kv_cache_bytes=per_sequence * batch)
    budget = deployment.budget_bytes
    largest = max_batch(budget, fixed.total_bytes, per_sequence)
    fits = gpus_memory.total_bytes <= budget
    if must_fit and not fits:
        name, spec = deployment.run.name, deployment.spec
        raise DlperfError(_no_fit(name, spec, gpus_memory, largest, batch, tp, budget))
    report.memory = {**gpus_memory.to_dict(), "budget_bytes": budget}
    report.fits, report.max_batch = fits, largest
    report.kv_cache_bytes_per_token = deployment.kv_bytes_per_token(prefill, per_gpu=False)
    report.kv_cache_bytes_per_token_per_gpu = deployment.kv_bytes_per_token(prefill, per_gpu=True)


def _phases(report: ServeReport, deployment, prefilled: tuple, decoding: tuple) -> float:
    """The request's times, the prefill and middle decode step's reports and the
    energy; returns the middle decode step's time."""
    (prefill, prefill_t), (decoded, points) = prefilled, decoding
    spec, scheme = deployment.spec, deployment.scheme
    times = [t["time_s"] for _, t in decoded]
    decode_s = mean_decode_s(points, times, report.input_len, report.output_len)
    _request_times(report, prefill_t["time_s"], decode_s)
    middle, middle_t = decoded[len(decoded) // 2]
    report.prefill = _phase(prefill, prefill_t, scheme)
    report.decode = _phase(middle, {**middle_t, "time_s": report.tpot_s}, scheme)
    report.decode.extra.update(cached_tokens=points, step_s=times)
    _energy(report, spec, (prefill, prefill_t["time_s"]), (middle, middle_t["time_s"]))
    report.unsupported_ops = {**prefill.unsupported, **middle.unsupported}
    _bound_notes(report, middle, spec, scheme)
    return middle_t["time_s"]


def _speculate(speculation, timeline: Timeline, deployed: tuple, batch: int, cached: int,
               plain_s: float) -> dict:  # fmt: skip
    """The what-if at the middle decode step's cache length (`speculative`)."""
    _, verify = timeline.verify(batch, speculation.k + 1, cached)
    draft_s = 0.0  # n-gram lookup runs on the host
    if speculation.draft:
        draft = deploy(speculation.draft, *deployed).timeline(timeline.input_len, 2)
        ((_, timing),), _ = draft.decode(batch, [cached])
        draft_s = timing["time_s"]
    found = what_if(speculation, verify["time_s"], draft_s, plain_s)
    found["cached_tokens"] = cached
    return found


def _energy(report: ServeReport, spec, prefill: tuple, decode: tuple) -> None:
    """Joules per output token: every GPU through the prompt's forward and the
    decode steps (the middle step's draw over the mean step time)."""
    (first, first_s), (middle, middle_s) = prefill, decode
    prompt = rows_joules(spec, first.rows, first_s)
    step = rows_joules(spec, middle.rows, middle_s)
    if prompt is None or step is None:
        return
    per_step = step * report.tpot_s / middle_s if middle_s else step
    report.prefill.extra["energy_j"] = prompt
    report.decode.extra["energy_j"] = per_step
    request = (prompt + (report.output_len - 1) * per_step) * report.gpus
    report.energy_per_output_token_j = request / (report.batch * report.output_len)


def _request_times(report: ServeReport, ttft_s: float, tpot_s: float) -> None:
    """A request's latency and the deployment's throughput from TTFT and TPOT."""
    report.ttft_s, report.tpot_s = ttft_s, tpot_s
    report.latency_s = ttft_s + (report.output_len - 1) * tpot_s
    report.output_tokens_per_s = report.batch * report.output_len / report.latency_s
    report.output_tokens_per_s_per_gpu = report.output_tokens_per_s / (report.tp * report.pp)


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


def _no_fit(name, spec, memory: ServingMemory, largest: int, batch: int, tp: int, budget) -> str:
    gb = 1e9
    rest = memory.activations_bytes + memory.workspace_bytes
    if largest == 0 and rest >= budget:
        return (
            f"the activations of one step ({memory.activations_bytes / gb:.1f} GB per GPU) and "
            f"the workspace fill the {budget / gb:.1f} GB usable on {spec.id}; give fewer "
            "--max-num-batched-tokens or a larger --gpu-memory-utilization"
        )
    if largest == 0:
        more = tp * 2  # the fewest GPUs (doubling) whose weight shares leave room
        while memory.weights_bytes * tp / more + rest >= budget:
            more *= 2
        return (
            f"{name}'s weights ({memory.weights_bytes / gb:.1f} GB per GPU) and activations "
            f"({memory.activations_bytes / gb:.1f} GB) leave no room for a KV cache in "
            f"{budget / gb:.1f} GB of {spec.id}; use --tp {more}, a smaller --precision "
            "(int8-weight, int4-weight) or fewer --max-num-batched-tokens"
        )
    return (
        f"batch {batch} does not fit on {spec.id}: {memory.total_bytes / gb:.1f} GB per GPU "
        f"(KV cache {memory.kv_cache_bytes / gb:.1f} GB) > {budget / gb:.1f} GB usable; "
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
