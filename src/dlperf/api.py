"""Thin facade: the documented entry points, each resolving its run once and
handing off to one module."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from torch import nn

from .analysis import Analysis
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .precision import resolve_for
from .run import Run, Session, refuse_reduce_dtype, resolve, resolve_model

__all__ = [
    "analyze",
    "measure",
    "memory",
    "plan",
    "profile_trace",
    "report",
    "resolve_model",
    "serve",
]


def analyze(
    model: nn.Module | str | Run,
    inputs=None,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "fp32",
    training: bool = True,
    batch: int | None = None,
    seq_len: int | None = None,
    optimizer: str = "adamw",
    progress: Callable[[int], None] | None = None,
    session: Session | None = None,
    attention: str = "auto",
    checkpoint: str = "none",
    compile: bool = False,
    cuda_graphs: bool = False,
    loss: str = "eager",
    reduce_dtype: str | None = None,
    sparsity: str | None = None,
    clip_grad: bool = False,
    channels_last: bool = False,
) -> Analysis:
    """Predict every op of one training (or inference) step of `model` on `gpu`.

    `model` is an nn.Module (real weights or built on the meta device), a
    name such as "torchvision:resnet50" or "hf:gpt2", or a resolved `Run`;
    `inputs` a tensor, a tuple of tensors or a dict of keyword tensors (real
    or meta), shapes as text ("8x3x224x224"), or None for a named model's
    default inputs. Nothing is allocated and the model is not changed: it
    runs on fake tensors. A `session` shared between calls traces once.
    The way the step runs: `attention` ("auto", "flash", "efficient",
    "cudnn", "math", "eager"), `checkpoint` ("none", "full", "selective",
    "every:K"), `compile` (torch.compile), `cuda_graphs`, and a language
    model's `loss` ("eager": its own code, "fused": a fused cross-entropy
    kernel, "chunked": a chunked linear cross-entropy; `tracing.losses`).
    `reduce_dtype` is refused: one GPU's step reduces no gradients (`plan`).
    `sparsity` "2:4" prunes the linear layers' weights and runs their forward
    and input-gradient GEMMs on the sparse Tensor Cores (`ops/sparse.py`).
    `clip_grad` adds `clip_grad_norm_` before the optimizer step;
    `channels_last` traces a copy of the model and its image inputs in NHWC.
    """
    refuse_reduce_dtype(reduce_dtype)
    run = resolve(
        model,
        inputs,
        gpu=gpu,
        precision=precision,
        training=training,
        optimizer=optimizer,
        batch=batch,
        seq_len=seq_len,
        attention=attention,
        checkpoint=checkpoint,
        compile=compile,
        cuda_graphs=cuda_graphs,
        loss=loss,
        sparsity=sparsity,
        clip_grad=clip_grad,
        channels_last=channels_last,
    )
    return (session or Session()).analysis(run, progress)


def memory(
    model,
    inputs=None,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "auto",
    optimizer: str = "adamw",
    checkpoint: str = "none",
    accumulate: int = 1,
    fit: bool = False,
    batch: int | None = None,
    seq_len: int | None = None,
    session: Session | None = None,
    attention: str = "auto",
    compile: bool = False,
    cuda_graphs: bool = False,
    loss: str = "eager",
    reduce_dtype: str | None = None,
    sparsity: str | None = None,
    clip_grad: bool = False,
    channels_last: bool = False,
):
    """Memory of one training step per GPU: weights, gradients, optimizer
    states, saved activations (by module), transients, overhead, and the peak.

    `checkpoint` is none, full, selective, selective-op or every:K (over the
    model's repeated blocks); `attention`, `compile`, `cuda_graphs`, `loss`,
    `clip_grad` and `channels_last` as for `analyze`; `accumulate` splits the
    batch into that many micro-batches; `fit` also finds the largest batch
    (and sequence length) that fits the GPU: `max_batch` is 0 when not even
    one sample fits (None without `fit`).
    """
    from .training_memory import memory_report

    refuse_reduce_dtype(reduce_dtype)
    run = resolve(
        model,
        inputs,
        gpu=gpu,
        precision=precision,
        optimizer=optimizer,
        batch=batch,
        seq_len=seq_len,
        attention=attention,
        checkpoint=checkpoint,
        compile=compile,
        cuda_graphs=cuda_graphs,
        loss=loss,
        sparsity=sparsity,
        clip_grad=clip_grad,
        channels_last=channels_last,
    )
    return memory_report(run, session or Session(), run.checkpoint, accumulate, fit)


def plan(
    model,
    inputs=None,
    gpu: str | HardwareSpec = "h100-sxm5-80gb",
    gpus: int = 8,
    gpus_per_node: int = 8,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    precision: str = "auto",
    optimizer: str = "adamw",
    node_network_bytes_per_s: float | None = None,
    seq_len: int | None = None,
    measured_interconnect: dict | None = None,
    session: Session | None = None,
    dp: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    sharding: str | None = None,
    attention: str = "auto",
    checkpoint: str | None = None,
    compile: bool = False,
    cuda_graphs: bool = False,
    cp: int | None = None,
    ep: int | None = None,
    schedule: str | None = None,
    sequence_parallel: bool | None = None,
    loss: str = "eager",
    reduce_dtype: str | None = None,
    sparsity: str | None = None,
    clip_grad: bool = False,
    channels_last: bool = False,
):
    """Price and rank parallel plans of `model` on `gpus` GPUs: memory per GPU,
    compute, collectives (bytes, time, exposed time), step time, throughput
    and MFU. Only plans that fit are ranked (fastest first); when none fits,
    the nearest are shown with what would make each fit.

    Any dimension given is fixed, the others searched: `dp`, `tp`, `pp`, `cp`
    (context parallelism), `ep` (expert parallelism, MoE models), `sharding`
    (none, zero1, zero2, fsdp = ZeRO-3, hsdp = sharded within a node),
    `schedule` (gpipe, 1f1b, interleaved:V), `sequence_parallel`, and
    `checkpoint` (none, full, selective, every:K; None searches none,
    selective and full). `reduce_dtype` (fp32, the default, or bf16) is the
    dtype sharded data parallelism reduce-scatters gradients in. The
    micro-batch is traced, not searched: given, or the inputs' batch (1 for a
    named model's default inputs)."""
    from .parallel import Fixed, plan_report

    if gpus < 1 or gpus_per_node < 1:
        raise DlperfError("--gpus and --gpus-per-node must be positive")
    if node_network_bytes_per_s is not None and not 0 < node_network_bytes_per_s < math.inf:
        raise DlperfError("the inter-node network bandwidth must be a positive number")
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
        if value is not None and value < 1:
            raise DlperfError(f"--{name} must be a positive whole number")
    fixed = Fixed(dp, tp, pp, cp, ep, sharding, schedule, sequence_parallel)
    # The default inputs are traced at the micro-batch (1 unless given).
    default_batch = (micro_batch or 1) if inputs is None else None
    run = resolve(
        model,
        inputs,
        gpu=gpu,
        precision=precision,
        optimizer=optimizer,
        batch=default_batch,
        seq_len=seq_len,
        attention=attention,
        checkpoint=checkpoint or "none",
        compile=compile,
        cuda_graphs=cuda_graphs,
        loss=loss,
        reduce_dtype=reduce_dtype,
        sparsity=sparsity,
        clip_grad=clip_grad,
        channels_last=channels_last,
    )
    return plan_report(
        run,
        session or Session(),
        gpus,
        gpus_per_node,
        global_batch,
        micro_batch or run.batch,
        node_network_bytes_per_s,
        measured_interconnect,
        fixed=fixed,
        checkpoint=checkpoint,
    )


def profile_trace(path, gpu: str | HardwareSpec | None = None):
    """Read a PyTorch profiler trace of a real GPU run (`dlperf trace`)."""
    from .measurement.trace_report import analyze_profile

    return analyze_profile(path, gpu)


def compare(model, trace, inputs=None, gpu: str | HardwareSpec | None = None, **options):
    """The model's predicted ops beside a profiler trace of its run (`dlperf compare`).

    `trace` is a torch.profiler Chrome trace (.json or .json.gz) of the same
    model run as `options` describe it (those of `analyze`: batch, seq_len,
    precision, training, ...), or a folder of one trace per rank of one run.
    `gpu` defaults to the device the trace names (the probed CPU for a trace
    of a CPU run). Returns a `Comparison`, or for a folder a `RankComparison`.
    """
    from .measurement.compare import compare_trace
    from .measurement.ranks import RankComparison, rank_traces

    paths = rank_traces(trace)
    comparisons, session = [], Session()
    for path in paths:
        data = read_profile(path)
        spec = trace_device(data, gpu)
        analysis = analyze(model, inputs, gpu=spec, session=session, **options)
        comparisons.append(compare_trace(analysis, data))
    if len(paths) == 1 and not Path(trace).is_dir():
        return comparisons[0]
    return RankComparison(str(trace), comparisons)


def calibrate_trace(trace, model, out, inputs=None, gpu=None, **options):
    """Fit the device's corrections from a profiler trace of `model`'s run and
    write them as a spec file at `out` (`dlperf calibrate --trace`).

    The model options (`options`, as for `analyze`) must describe the run the
    trace recorded. `gpu` names the catalogue device it extends (default: the
    one the trace names; the probed CPU for a trace with no kernels). Returns
    the loaded spec: `--gpu OUT` on every verb prices with it.
    """
    import dataclasses

    from .measurement.calibrate import calibrated_document, write_spec
    from .measurement.compare import compare_trace
    from .measurement.trace_fit import fit_calibration

    data = read_profile(one_trace(trace, "calibrate --trace"))
    base = trace_device(data, gpu)
    if base.calibration is not None:  # fit against the model, not an earlier fit
        base = dataclasses.replace(base, calibration=None)
    analysis = analyze(model, inputs, gpu=base, **options)
    comparison = compare_trace(analysis, data)
    calibration, overrides = fit_calibration(analysis, comparison, data)
    return write_spec(calibrated_document(base, calibration, overrides), out)


def one_trace(path, verb: str):
    """`path`, refused in one line when it is a folder of rank traces."""
    if Path(path).is_dir():
        raise DlperfError(
            f"{verb} reads one trace and {path} is a folder: give one rank's file "
            "(dlperf compare reads a folder of them)"
        )
    return path


def read_profile(path):
    """A profiler trace as data (`measurement.kineto.TraceData`); nothing runs."""
    from .measurement.kineto import read_trace

    return read_trace(path)


def trace_device(data, gpu: str | HardwareSpec | None = None) -> HardwareSpec:
    """The device a trace ran on: `gpu` when given, else the GPU its
    deviceProperties name, else the probed CPU for a trace with no kernels."""
    from .hardware import resolve_id

    if not data.kernels and data.device_name:
        raise DlperfError(
            f"{data.path} ran on {data.device_name} but holds no GPU kernels: record it with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )
    if gpu is not None:
        return get_gpu(gpu)
    if not data.kernels:
        return get_gpu("cpu")
    found = resolve_id(data.device_name) if data.device_name else None
    if not found:
        raise DlperfError(
            f"cannot tell the GPU of {data.path} (device {data.device_name!r}); pass --gpu"
        )
    return get_gpu(found)


def measure(
    model,
    inputs=None,
    device: str = "cpu",
    precision: str = "auto",
    training: bool = True,
    batch: int | None = None,
    seq_len: int | None = None,
    steps: int = 3,
    gpu: str | None = None,
    trace_out=None,
):
    """Run the model for real on `device` and compare each op with its prediction.

    `trace_out` writes the profiled steps as a torch.profiler Chrome trace
    (`.json`; `.json.gz` compressed), which `compare` and `calibrate_trace` read.

    The prediction uses the device's own spec (the CPU is probed once), or on
    the CPU a spec file of it that `dlperf calibrate` wrote (`gpu`). The model
    and inputs given are not changed: a copy runs. `gpu` is refused unless it
    describes the device at hand: nothing runs on a GPU that is not here.
    `precision` "auto" resolves as `analyze` resolves it (fp32 on a CPU).
    """
    from .measurement.run import measure_model

    if device not in ("cpu", "cuda"):
        raise DlperfError(f"unknown device {device!r}; use cpu or cuda")
    cpu_spec = _measured_cpu(gpu, device)
    loaded = resolve_model(model, inputs, batch, seq_len)
    name, module, inputs = loaded.name, loaded.module, loaded.inputs
    if device == "cpu":
        spec = cpu_spec
    else:
        import torch

        if not torch.cuda.is_available():
            raise DlperfError("no CUDA device here; use --device cpu")
        from .hardware import resolve_id

        found = resolve_id(torch.cuda.get_device_name())
        if not found:
            raise DlperfError("this GPU is not in the catalogue; run `dlperf calibrate` first")
        spec = get_gpu(found)
    policy = resolve_for(spec, precision)
    from .measurement.run import adamw_as_run

    # priced as the step runs it: fused AdamW where this PyTorch has it
    optimizer = adamw_as_run(device)
    predicted = analyze(
        module, inputs, gpu=spec, precision=policy, training=training, optimizer=optimizer
    )
    # A model named or built without weights runs with real, initialised ones:
    # rebuilt by its loader, since a meta model's custom parameters have no
    # reset_parameters to refill them.
    runnable = module
    if loaded.build_real and any(p.is_meta for p in module.parameters()):
        runnable = loaded.build_real()
    return measure_model(
        name, runnable, inputs, predicted, device, policy, training, steps, trace_out=trace_out
    )


def _measured_cpu(gpu, device: str):
    """The spec `measure` predicts the CPU with: the probe's, or a CPU spec file
    (`dlperf calibrate --out`); anything else is refused (None off the CPU)."""
    if gpu is None or (device == "cpu" and str(gpu).lower() in ("cpu", "local")):
        return get_gpu("cpu") if device == "cpu" else None
    refusal = (
        f"measure runs on this machine's device, not on --gpu {gpu}: drop --gpu, or give "
        "the CPU spec file dlperf calibrate wrote (to predict another GPU, use dlperf "
        "analyze --gpu)"
    )
    if device != "cpu" or isinstance(gpu, str) and not gpu.endswith((".toml", ".json")):
        raise DlperfError(refusal)
    spec = get_gpu(gpu)
    if spec.kind != "cpu":
        raise DlperfError(refusal)
    return spec


def report(
    analysis, path, memory=None, advice=None, measurement=None, serving=None, comparison=None
) -> str:
    """Write the HTML report of an analysis (and optional memory, advice,
    measurement, serving and a trace's `comparison`, from `compare`) to
    `path`; returns the path.

    `serving` is a `dlperf.serving.sweep.serving_sweep(run)` result: the
    Serving section (a decoder's latency and throughput against the batch
    size, the memory limit marked), or the line saying why it is absent."""
    from pathlib import Path

    from .rendering.html import render

    page = render(analysis, memory, advice, measurement, serving, comparison)
    try:
        Path(path).write_text(page)
    except OSError as err:
        raise DlperfError(f"cannot write {path}: {err.strerror or err}") from None
    return str(path)


def serve(model, **options):
    """Predict serving a decoder LLM: time to first token, time per output
    token, throughput, memory and the largest batch that fits (see
    `dlperf.serving.serve` for the options). Imported on first use: serving
    loads transformers' cache classes."""
    from .serving import serve as serve_model

    return serve_model(model, **options)


def simulate(model, **options):
    """Simulate a serving benchmark: requests from a dataset arriving at a rate,
    batched continuously over a paged KV cache (see `dlperf.serving.simulate`)."""
    from .serving.simulate import simulate as simulate_serving

    return simulate_serving(model, **options)
