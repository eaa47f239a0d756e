"""Thin facade: the documented entry points, each resolving its run once and
handing off to one module."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from .analysis import Analysis
from .errors import DlperfError
from .hardware import HardwareSpec, resolve_id
from .hardware import gpu as get_gpu
from .measurement.calibrate import calibrated_document, write_spec
from .measurement.compare import compare_trace, ran_on_other_gpu
from .measurement.kineto import read_trace
from .measurement.ranks import RankComparison, rank_traces
from .measurement.run import adamw_as_run, measure_model
from .measurement.trace_fit import fit_calibration
from .measurement.trace_report import analyze_profile
from .parallel import plan_report
from .precision import resolve_for
from .rendering.html import render
from .run import Run, Session, resolve, resolve_model, run_config
from .run_config import RunConfig
from .training_memory import memory_report

__all__ = [
    "analyze",
    "measure",
    "memory",
    "plan",
    "profile_trace",
    "report",
    "resolve_model",
    "RunConfig",
    "serve",
]


def analyze(
    model: nn.Module | str | Run,
    inputs=None,
    config: RunConfig | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    session: Session | None = None,
    **options,
) -> Analysis:
    """Predict every op of one training (or inference) step of `model`.

    `model` is an nn.Module (real weights or built on the meta device), a
    name such as "torchvision:resnet50" or "hf:gpt2", or a resolved `Run`;
    `inputs` a tensor, a tuple of tensors or a dict of keyword tensors (real
    or meta), shapes as text ("8x3x224x224"), or None for a named model's
    default inputs. Nothing is allocated and the model is not changed: it
    runs on fake tensors. A `session` shared between calls traces once.

    The run is `config` (a `RunConfig`, which may also come second:
    `analyze(model, config)`) with `options` laid over it, the keywords of
    `RunConfig.build`: gpu, precision, training, batch, seq_len, optimizer,
    attention ("auto", "flash", "efficient", "cudnn", "math", "eager", ...),
    checkpoint ("none", "full", "selective", "selective-op", "every:K"),
    compile, cuda_graphs, loss ("eager", "fused", "chunked"), sparsity
    ("2:4"), clip_grad, channels_last, power_limit, torch_version ...
    Options of other verbs (a plan's degrees, serving's engine) are refused.
    """
    run = resolve(model, inputs, config, verb="analyze", **options)
    return (session or Session()).analysis(run, progress)


def memory(
    model,
    inputs=None,
    config: RunConfig | None = None,
    *,
    accumulate: int = 1,
    fit: bool = False,
    session: Session | None = None,
    **options,
):
    """Memory of one training step per GPU: weights, gradients, optimizer
    states, saved activations (by module), transients, overhead, and the peak.

    The run as for `analyze`; `accumulate` splits the batch into that many
    micro-batches; `fit` also finds the largest batch (and sequence length)
    that fits the GPU: `max_batch` is 0 when not even one sample fits (None
    without `fit`).
    """
    run = resolve(model, inputs, config, verb="memory", **options)
    if not run.training:
        raise DlperfError("memory sizes a training step; for inference use dlperf serve")
    return memory_report(run, session or Session(), run.checkpoint, accumulate, fit)


def plan(model, inputs=None, config: RunConfig | None = None, *,
         session: Session | None = None, **options):  # fmt: skip
    """Price and rank parallel plans of `model` on `gpus` GPUs: memory per GPU,
    compute, collectives (bytes, time, exposed time), step time, throughput
    and MFU. Only plans that fit are ranked (fastest first); when none fits,
    the nearest are shown with what would make each fit.

    The run as for `analyze`, and the plan (`ParallelConfig`): gpus,
    gpus_per_node, global_batch, micro_batch, node_network_bytes_per_s,
    measured_interconnect; any dimension given is fixed, the others
    searched: `dp`, `tp`, `pp`, `cp` (context parallelism), `ep` (expert
    parallelism, MoE models), `sharding` (none, zero1, zero2, fsdp = ZeRO-3,
    hsdp = sharded within a node), `schedule` (gpipe, 1f1b, interleaved:V),
    `sequence_parallel`, and `checkpoint` (none, full, selective, every:K;
    not given: none, selective and full are searched). `reduce_dtype` (fp32,
    the default, or bf16) is the dtype sharded data parallelism
    reduce-scatters gradients in. The micro-batch is traced, not searched:
    given, or the inputs' batch (1 for a named model's default inputs)."""
    config = run_config(inputs, config, model=model, **options)
    par = config.parallel
    micro = par.micro_batch or config.model.batch
    if config.model.inputs is None:  # the default inputs, at the micro-batch
        config = RunConfig.build(config, batch=micro or 1)
    run = resolve(model, config=config, verb="plan")
    return plan_report(run, session or Session(), micro or run.batch)


def profile_trace(path, gpu: str | HardwareSpec | None = None):
    """Read a PyTorch profiler trace of a real GPU run (`dlperf trace`)."""
    return analyze_profile(path, gpu)


def compare(model, trace, inputs=None, config: RunConfig | None = None, **options):
    """The model's predicted ops beside a profiler trace of its run (`dlperf compare`).

    `trace` is a torch.profiler Chrome trace (.json or .json.gz) of the same
    model run as the run (`config` and `options`, as for `analyze`)
    describes it, or a folder of one trace per rank of one run. The GPU
    defaults to the device the trace names (the probed CPU for a trace of a
    CPU run). Returns a `Comparison`, or for a folder a `RankComparison`.
    """
    config = run_config(inputs, config, model=model, **options)
    paths = rank_traces(trace)
    comparisons, session = [], Session()
    for path in paths:
        data = read_profile(path)
        on = RunConfig.build(config, gpu=trace_device(data, config.device.gpu))
        comparisons.append(compare_trace(analyze(model, on, session=session), data))
    if len(paths) == 1 and not Path(trace).is_dir():
        return comparisons[0]
    return RankComparison(str(trace), comparisons)


def calibrate_trace(trace, model, out, inputs=None, config: RunConfig | None = None, **options):
    """Fit the device's corrections from a profiler trace of `model`'s run and
    write them as a spec file at `out` (`dlperf calibrate --trace`).

    The run (`config` and `options`, as for `analyze`) must describe the run
    the trace recorded. Its GPU names the catalogue device the fit extends
    (default: the one the trace names; the probed CPU for a trace with no
    kernels). Returns the loaded spec: `--gpu OUT` on every verb prices with it.
    """
    config = run_config(inputs, config, model=model, **options)
    data = read_profile(one_trace(trace, "calibrate --trace"))
    base = trace_device(data, config.device.gpu)
    ran = ran_on_other_gpu(base, data)
    if ran is not None:  # a fit would make one GPU's spec run at another's speed
        raise DlperfError(
            f"{data.path} ran on {data.device_name} ({ran}), not {base.id}: calibrate the GPU "
            f"the trace ran on (leave out --gpu, or give --gpu {ran})"
        )
    if base.calibration is not None:  # fit against the model, not an earlier fit
        base = dataclasses.replace(base, calibration=None)
    analysis = analyze(model, RunConfig.build(config, gpu=base))
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
    return read_trace(path)


def trace_device(data, gpu: str | HardwareSpec | None = None) -> HardwareSpec:
    """The device a trace ran on: `gpu` when given, else the GPU its
    deviceProperties name, else the probed CPU for a trace with no kernels."""
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
    config: RunConfig | None = None,
    *,
    device: str = "cpu",
    steps: int = 3,
    trace_out=None,
    **options,
):
    """Run the model for real on `device` and compare each op with its prediction.

    `trace_out` writes the profiled steps as a torch.profiler Chrome trace
    (`.json`; `.json.gz` compressed), which `compare` and `calibrate_trace` read.

    The run (`config` and `options`) is the model as written: its inputs,
    batch, seq_len, precision and training; the step runs eagerly, so the
    ways a step can run (checkpoint, compile, attention ...) are refused.
    The prediction uses the device's own spec (the CPU is probed once), or on
    the CPU a spec file of it that `dlperf calibrate` wrote (`gpu`). The model
    and inputs given are not changed: a copy runs. `gpu` is refused unless it
    describes the device at hand: nothing runs on a GPU that is not here.
    `precision` "auto" resolves as `analyze` resolves it (fp32 on a CPU).
    """
    if device not in ("cpu", "cuda"):
        raise DlperfError(f"unknown device {device!r}; use cpu or cuda")
    config = run_config(inputs, config, **options).check("measure")
    how = config.model
    cpu_spec = _measured_cpu(config.device.gpu, device)
    loaded = resolve_model(model if model is not None else how.model, how.inputs, how.batch,
                           how.seq_len)  # fmt: skip
    name, module, inputs = loaded.name, loaded.module, loaded.inputs
    if device == "cpu":
        spec = cpu_spec
    else:
        if not torch.cuda.is_available():
            raise DlperfError("no CUDA device here; use --device cpu")
        found = resolve_id(torch.cuda.get_device_name())
        if not found:
            raise DlperfError("this GPU is not in the catalogue; run `dlperf calibrate` first")
        spec = get_gpu(found)
    training = config.step.training
    policy = resolve_for(spec, config.precision.precision)
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
