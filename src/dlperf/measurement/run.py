"""`dlperf measure`: run the model for real on the device at hand and put the
measured time of each op beside its prediction.

A copy of the model runs (the caller's model and inputs are never changed),
with real weights (random, as at init, for a meta model) and random inputs of
the given shapes, training with fused AdamW: warm-up steps first, then
profiled steps (torch.profiler, shapes recorded) for the per-op times, then
unprofiled steps for the step time (median and spread). The profiled steps can
be written as a Chrome trace (`--trace-out`) for `compare` and `calibrate`. Measured ops are
matched to predicted rows as `compare` matches a trace's (`trace_match`): by the
profiler's name of the op (SDPA's backend calls are dlperf's fused attention
rows, cuDNN's batch norm is `native_batch_norm` ...), the outermost call of a
predicted name owning the time of the calls inside it, and by input shapes in
order within each profiled step, then by name alone.
"""

from __future__ import annotations

import copy
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import DlperfError
from ..hardware.timing import time_callable
from ..jsonable import fields_dict
from ..tracing import _loss_of
from .kineto import matrix_kernel, tensor_core_kernel
from .trace_match import Call, canonical, match, shape_key, trace_name


@dataclass
class MeasureReport:
    model: str
    device: str
    precision: str
    training: bool
    predicted_time_s: float
    measured_time_s: float
    measured_spread_s: float
    ops: list[dict] = field(default_factory=list)
    categories: dict = field(default_factory=dict)
    tensor_core_kernels: dict | None = None
    optimizer: str | None = None  # dlperf's name of the optimizer the step ran (training)

    @property
    def error(self) -> float:
        return (self.predicted_time_s - self.measured_time_s) / self.measured_time_s

    def to_dict(self) -> dict:
        return fields_dict(self) | {"error": self.error}


def materialize(model: nn.Module, device: str) -> nn.Module:
    """A copy of `model` on `device` to run for real; the caller's model is never touched.

    A model built on the meta device gets random weights, as at init.
    """
    try:
        model = copy.deepcopy(model)
    except (TypeError, RuntimeError, copy.Error) as err:
        raise DlperfError(
            f"cannot copy {type(model).__name__} to measure it ({err}); dlperf measures a copy "
            "so as never to change your model: pass its name or a factory instead"
        ) from None
    if any(p.is_meta for p in model.parameters()) or any(b.is_meta for b in model.buffers()):
        model = model.to_empty(device=device)
        for module in model.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
            for name, buf in module.named_buffers(recurse=False):
                if buf is not None and buf.is_floating_point():
                    buf.fill_(1.0 if "var" in name else 0.0)
    return model.to(device)


def real_inputs(inputs, device: str):
    def make(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                out = torch.randn(x.shape, dtype=x.dtype, device=device)
                if x.dim() == 4 and x.stride()[1] == 1 and x.shape[1] > 1:
                    out = out.contiguous(memory_format=torch.channels_last)
                return out
            return torch.zeros(x.shape, dtype=x.dtype, device=device)
        if isinstance(x, (list, tuple)):
            return type(x)(make(v) for v in x)
        if isinstance(x, dict):
            return {k: make(v) for k, v in x.items()}
        return x

    return make(inputs)


def adamw_as_run(device: str) -> str:
    """The AdamW a measured step runs on `device`, by dlperf's optimizer name:
    fused (one pass over weights, gradients and states) where this PyTorch has
    it for the device, else torch.optim's default."""
    probe = torch.nn.Parameter(torch.zeros(1, device=device))
    try:
        torch.optim.AdamW([probe], fused=True)
    except (RuntimeError, ValueError):
        return "adamw"
    return "adamw-fused"


def _adamw(model: nn.Module, name: str) -> torch.optim.Optimizer | None:
    """AdamW as the prediction priced it (`name`: "adamw-fused" or "adamw", as
    `adamw_as_run` picks), over the model's trainable weights."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return None  # nothing to train: the step is forward and backward
    return torch.optim.AdamW(params, fused=name == "adamw-fused")


def _step_fn(model, inputs, training: bool, autocast_dtype, device: str, optimizer_name: str):
    optimizer = _adamw(model, optimizer_name) if training else None
    args, kwargs = (
        ((), inputs)
        if isinstance(inputs, dict)
        else ((inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs), {})
    )

    def step():
        ctx = torch.autocast(device, dtype=autocast_dtype) if autocast_dtype else _null()
        if not training:
            with torch.no_grad(), ctx:
                return model(*args, **kwargs)
        model.zero_grad(set_to_none=True)
        with ctx:
            loss = _loss_of(model(*args, **kwargs))
        loss.backward()
        if optimizer:
            optimizer.step()
        return loss

    return step


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _quiet_profiler:
    """Keep the profiler's own log (Kineto's start/stop lines, and the CUDA build's
    `gpuGetDeviceCount failed` on a machine without a GPU) off the user's stderr.

    Kineto reads its log level once, when the first profile starts; a level set
    by the user wins.
    """

    def __enter__(self):
        self.set_here = "KINETO_LOG_LEVEL" not in os.environ
        if self.set_here:
            os.environ["KINETO_LOG_LEVEL"] = "6"  # above its highest level: nothing
        return self

    def __exit__(self, *exc):
        if self.set_here:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        return False


def measure_model(
    name,
    model,
    inputs,
    analysis,
    device="cpu",
    precision_policy=None,
    training=True,
    steps=3,
    warmup=2,
    trace_out=None,
) -> MeasureReport:
    if device == "cuda" and not torch.cuda.is_available():
        raise DlperfError("no CUDA device here; use --device cpu")
    model = materialize(model, device)
    model.train(training)
    data = real_inputs(inputs, device)
    autocast = precision_policy.autocast_dtype if precision_policy else None
    if precision_policy and precision_policy.param_dtype != torch.float32:
        model = model.to(precision_policy.param_dtype)
    step = _step_fn(model, data, training, autocast, device, analysis.optimizer)
    sync = torch.cuda.synchronize if device == "cuda" else None
    for _ in range(warmup):
        step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with _quiet_profiler():
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for i in range(steps):
                # the mark profilers with a schedule write: the trace's steps
                with torch.profiler.record_function(f"ProfilerStep#{i}"):
                    step()
                    if sync:
                        sync()
        events = prof.events()
        if trace_out is not None:
            prof.export_chrome_trace(str(trace_out))
    rows = [r for r in analysis.rows if r.phase != "optimizer"]
    calls = _measured_calls(events, device, {trace_name(r.op) for r in rows})
    timing = time_callable(step, warmup=1, repeats=max(5, steps), synchronize=sync)
    # the optimizer the step ran: none where nothing is trainable
    stepped = training and any(p.requires_grad for p in model.parameters())
    ops, categories = _beside_predictions(rows, calls, steps)
    tc = _tensor_core_usage(prof) if device == "cuda" else None
    return MeasureReport(
        name,
        device,
        analysis.precision,
        training,
        analysis.time_s,
        timing.median_s,
        timing.spread_s,
        ops,
        categories,
        tc,
        analysis.optimizer if stepped else None,
    )


def _measured_calls(events, device: str, names: set[str]) -> list[Call]:
    """The profiled model-op calls in start order: each outermost aten call
    whose name, as `trace_match.canonical` reads it, is one of the predicted
    `names` (`trace_match.trace_name` of the rows). Its time is its device time
    on a GPU (its kernels and those of the calls inside it), else its CPU time;
    its step is the `ProfilerStep#i` span it starts in (by time: on a GPU
    autograd runs backward on a thread of its own, outside the step's calls)."""
    spans = [
        (e.time_range.start, e.time_range.end, int(e.name.removeprefix("ProfilerStep#")))
        for e in events
        if e.name.startswith("ProfilerStep#")
    ]
    calls = []
    for event in events:
        name = canonical(event.name)
        if not event.name.startswith("aten::") or name not in names:
            continue
        outer = event.cpu_parent
        while outer is not None and canonical(outer.name) not in names:
            outer = outer.cpu_parent
        if outer is not None:
            continue  # inside a predicted op: that op's time holds this one's
        device_us = getattr(event, "device_time_total", 0) if device == "cuda" else 0
        us = device_us or event.cpu_time_total
        start = event.time_range.start
        step = next((i for lo, hi, i in spans if lo <= start <= hi), None)
        calls.append(Call(name, shape_key(event.input_shapes), start, us, step=step))
    return sorted(calls, key=lambda c: c.start_us)


def _beside_predictions(rows: list, calls: list[Call], steps: int) -> tuple[list[dict], dict]:
    """Each predicted op with its measured time (the median of its calls over the
    profiled steps; None when not matched), and the per-category sums of the
    matched ones."""
    ops, categories = [], defaultdict(lambda: {"predicted_time_s": 0.0, "measured_time_s": 0.0})
    taken, _ = match(rows, calls, steps)
    for row, mine in zip(rows, taken, strict=True):
        measured_s = statistics.median(c.time_us for c in mine) * 1e-6 if mine else None
        ops.append(
            {
                "module": row.module,
                "op": row.op,
                "phase": row.phase,
                "category": row.category,
                "predicted_time_s": row.time_s,
                "measured_time_s": measured_s,
            }
        )
        if measured_s is not None:
            categories[row.category]["predicted_time_s"] += row.time_s
            categories[row.category]["measured_time_s"] += measured_s
    return ops, dict(categories)


def _tensor_core_usage(prof) -> dict:  # pragma: no cover - needs a GPU
    """'Am I using Tensor Cores?': the profiled steps' kernels, by name."""
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return tensor_core_usage(e.name for e in kernels)


def tensor_core_usage(names) -> dict:
    """Of the kernel launches `names`: the GEMM and convolution kernels and the
    fused attention kernels, and how many of each ran on Tensor Cores."""
    counts = {
        "gemm_kernels": 0,
        "tensor_core_kernels": 0,
        "attention_kernels": 0,
        "attention_tensor_core_kernels": 0,
    }
    for name in names:
        kind = matrix_kernel(name)
        if kind is None:
            continue
        tc = tensor_core_kernel(name)
        if kind == "gemm":
            counts["gemm_kernels"] += 1
            counts["tensor_core_kernels"] += tc
        else:
            counts["attention_kernels"] += 1
            counts["attention_tensor_core_kernels"] += tc
    return counts
