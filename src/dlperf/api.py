"""Thin facade: the documented entry points, each handing off to one module."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from .analysis import Analysis, analyze_trace
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .models import LoadedModel, load_model, parse_input
from .precision import resolve_for
from .tracing import trace, within


def analyze(
    model: nn.Module | str,
    inputs=None,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "fp32",
    training: bool = True,
    batch: int | None = None,
    seq_len: int | None = None,
    optimizer: str = "adamw",
    progress: Callable[[int], None] | None = None,
) -> Analysis:
    """Predict every op of one training (or inference) step of `model` on `gpu`.

    `model` is an nn.Module (real weights or built on the meta device) or a
    name such as "torchvision:resnet50" or "hf:gpt2"; `inputs` a tensor, a
    tuple of tensors or a dict of keyword tensors (real or meta), or None for
    a named model's default inputs. Nothing is allocated and the model is not
    changed: it runs on fake tensors.
    """
    spec = get_gpu(gpu)
    policy = resolve_for(spec, precision)
    name, model, inputs = _resolve(model, inputs, batch, seq_len)
    recorded = trace(model, inputs, training=training, precision=policy, progress=progress)
    return analyze_trace(recorded, spec, model_name=name, optimizer=optimizer if training else "")


def resolve_model(model, inputs=None, batch=None, seq_len=None) -> LoadedModel:
    """The model and inputs of every verb that takes a model, resolved one way.

    `model` is a name (see models.py), an nn.Module, or a LoadedModel already
    resolved. `inputs` is None for the model's own (a named model's defaults
    at `batch` and `seq_len`, or what a model file's factory returns, resized
    by `batch` and `seq_len` when given), shapes as text ("8x3x224x224",
    "4x128:int64", one or a list), or tensors (a tensor, tuple or dict).
    A token model (hf:) given one tensor of ids feeds it to every id input
    (input_ids, labels, decoder_input_ids); shapes without a dtype are ids.
    """
    shapes = _shape_texts(inputs)
    if inputs is not None and (batch or seq_len):
        raise DlperfError(
            "--batch and --seq-len size the default inputs; with --input, give the sizes "
            "in the shape (like 8x3x224x224 or 8x512)"
        )
    if isinstance(model, LoadedModel):
        loaded = model
    elif isinstance(model, str):
        loaded = load_model(model, batch=batch, seq_len=seq_len)
    elif isinstance(model, nn.Module):
        loaded = LoadedModel(type(model).__name__, model, None, "module")
    else:
        raise DlperfError(
            f"a model is a name like torchvision:resnet50 or an nn.Module, "
            f"not {type(model).__name__}"
        )
    tokens = loaded.family == "sequence"
    if shapes is not None:
        if tokens and len(shapes) > 1:
            raise DlperfError(f"{loaded.name} takes one --input: its token ids, like 8x512")
        inputs = [_shape(text, tokens) for text in shapes]
        inputs = inputs[0] if len(inputs) == 1 else tuple(inputs)
    elif inputs is None:
        inputs = loaded.inputs
        if loaded.family == "user" and inputs is not None and (batch or seq_len):
            from .training_memory import resize_inputs

            inputs = resize_inputs(inputs, batch=batch, seq_len=seq_len)
    if tokens and isinstance(inputs, torch.Tensor):
        if inputs.is_floating_point():
            raise DlperfError(
                f"{loaded.name} takes token ids: give --input like 8x512 (int64), "
                f"not {str(inputs.dtype).removeprefix('torch.')}"
            )
        inputs = loaded.token_inputs(inputs)
    if inputs is None:
        raise DlperfError(
            f"no inputs for {loaded.name}: give --input SHAPE (from Python, a tensor of the "
            "input's shape; meta is fine)"
        )
    return replace(loaded, inputs=inputs)


def _shape_texts(inputs) -> list[str] | None:
    """Input shapes given as text (the command line's --input), else None."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
        return list(inputs)
    return None


def _shape(text: str, tokens: bool):
    """A meta tensor for one --input shape; a token model's default dtype is int64."""
    tensor = parse_input(text)
    if tokens and ":" not in text:
        tensor = torch.empty(tensor.shape, dtype=torch.int64, device="meta")
    return tensor


def _resolve(model, inputs, batch, seq_len):
    """resolve_model as (name, module, inputs)."""
    loaded = resolve_model(model, inputs, batch, seq_len)
    return loaded.name, loaded.module, loaded.inputs


def _first_tensor(inputs):
    if isinstance(inputs, torch.Tensor):
        return inputs
    values = inputs.values() if isinstance(inputs, dict) else inputs
    return next((t for t in values if isinstance(t, torch.Tensor)), None)


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
):
    """Memory of one training step per GPU: weights, gradients, optimizer
    states, saved activations (by module), transients, overhead, and the peak.

    `checkpoint` is none, blocks, every:K or sqrt (over the model's repeated
    blocks); `accumulate` splits the batch into that many micro-batches; `fit`
    also finds the largest batch (and sequence length) that fits the GPU:
    `max_batch` is 0 when not even one sample fits (None without `fit`).
    """
    from .training_memory import (
        OPTIMIZERS,
        MemoryReport,
        by_module,
        parse_checkpoint,
        resize_inputs,
        step_memory,
    )

    spec = get_gpu(gpu)
    policy = resolve_for(spec, precision)
    parse_checkpoint(checkpoint)
    if optimizer not in OPTIMIZERS:
        raise DlperfError(f"unknown optimizer {optimizer!r}; choose from: {', '.join(OPTIMIZERS)}")
    loaded = resolve_model(model, inputs, batch, seq_len)
    name, model, inputs = loaded.name, loaded.module, loaded.inputs
    first = _first_tensor(inputs)
    full_batch = int(first.shape[0]) if first is not None and first.dim() else 1
    if accumulate < 1 or full_batch % accumulate:
        raise DlperfError(
            f"--accumulate {accumulate} must divide the batch {full_batch} into equal micro-batches"
        )
    micro = full_batch // accumulate
    micro_inputs = resize_inputs(inputs, batch=micro) if accumulate > 1 else inputs

    def traced(step_inputs, timed: bool = True):
        """A trace of one step, and each block's forward time (for recompute costs)."""
        recorded = trace(model, step_inputs, training=True, precision=policy)
        return recorded, _block_times(recorded, spec, name, "forward") if timed else {}

    recorded, forward = traced(micro_inputs)
    terms = step_memory(recorded, spec, optimizer, checkpoint, forward)
    policies = []
    for option in ("none", "blocks", "sqrt"):  # what-ifs priced on the same trace
        alt = (
            terms
            if option == checkpoint
            else step_memory(recorded, spec, optimizer, option, forward)
        )
        policies.append(
            {
                "checkpoint": alt["policy"],
                "activations_bytes": alt["activations_bytes"],
                "peak_bytes": alt["peak_bytes"],
                "recompute_s": alt["recompute_s"],
                "fits": alt["peak_bytes"] <= spec.memory_bytes,
            }
        )
    report = MemoryReport(
        model=name,
        gpu=spec.id,
        precision=policy.name,
        optimizer=optimizer,
        checkpoint=terms["policy"],
        accumulate=accumulate,
        batch=full_batch,
        micro_batch=micro,
        params=recorded.params,
        capacity_bytes=spec.memory_bytes,
        recompute_s=terms["recompute_s"],
        by_module=by_module(recorded),
        policies=policies,
        **{
            k: terms[k]
            for k in (
                "weights_bytes",
                "gradients_bytes",
                "optimizer_bytes",
                "activations_bytes",
                "transient_bytes",
                "overhead_bytes",
                "peak_bytes",
                "peak_phase",
            )
        },
    )
    if fit:

        def peak_at(step_inputs):  # the peak needs no timing
            recorded_at, _ = traced(step_inputs, timed=False)
            return step_memory(recorded_at, spec, optimizer, checkpoint, {})

        report.max_batch = _largest(
            lambda b: peak_at(resize_inputs(inputs, batch=b)), spec.memory_bytes
        )
        if first is not None and first.dim() == 2 and not first.is_floating_point():
            report.max_seq_len = _largest(
                lambda s: peak_at(resize_inputs(micro_inputs, seq_len=s)),
                spec.memory_bytes,
                step=64,
                limit=loaded.max_positions or 1 << 20,  # no longer than its position table
            )
    return report


def _block_times(recorded, spec, name: str, phase: str) -> dict[str, float]:
    """Predicted time of each repeated block's ops in one phase."""
    timing = analyze_trace(recorded, spec, model_name=name, optimizer="")
    times: dict[str, float] = {}
    for row in timing.rows:
        if row.phase != phase:
            continue
        for block in recorded.blocks:
            if within(row.module, block):
                times[block] = times.get(block, 0.0) + row.time_s
    return times


def _largest(peak_at, capacity: int, step: int = 1, limit: int = 1 << 20) -> int | None:
    """The largest size (a multiple of `step`) whose step fits in `capacity`.

    Memory grows with size (linearly in the batch; with the square of the
    sequence under explicit attention), so doubling then bisecting finds it
    with about 2 log2(size) traces.
    """

    def fits(size):
        return size <= limit and peak_at(size)["peak_bytes"] <= capacity

    if not fits(step):
        return 0
    low, high = step, 2 * step
    while high <= limit and fits(high):
        low, high = high, high * 2
    while high - low > step:
        mid = (low + high) // 2 // step * step
        if mid <= low:
            break
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _profile(model, inputs, name, spec, policy, optimizer, micro_batch):
    """One traced step at the micro-batch size, summarised for the planner."""
    from .parallel import ModelProfile
    from .training_memory import resize_inputs, transient_bytes

    step_inputs = resize_inputs(inputs, batch=micro_batch)
    recorded = trace(model, step_inputs, training=True, precision=policy)
    timing = analyze_trace(recorded, spec, model_name=name, optimizer=optimizer)
    blocks = recorded.blocks

    def in_block(path: str) -> bool:
        return any(within(path, b) for b in blocks)

    block_time = {"forward": 0.0, "backward": 0.0}
    other_time = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for row in timing.rows:
        target = block_time if in_block(row.module) and row.phase in block_time else other_time
        target[row.phase] += row.time_s
    block_acts = sum(
        t.nbytes for t in recorded.saved if t.kind == "activation" and in_block(t.module)
    )
    other_acts = recorded.activation_bytes - block_acts
    sizes = dict(model.named_modules())
    block_params = sum(sum(p.numel() for p in sizes[b].parameters()) for b in blocks)
    n = max(len(blocks), 1)
    first = _first_tensor(step_inputs)
    tokens = (
        int(first.shape[1])
        if first is not None and first.dim() == 2 and not first.is_floating_point()
        else 0
    )
    return ModelProfile(
        name=name,
        params=recorded.params,
        block_params=block_params,
        blocks=len(blocks),
        block_activations_bytes=block_acts / n,
        other_activations_bytes=other_acts,
        block_output_bytes=max((recorded.module_inputs.get(b, 0) for b in blocks), default=0),
        block_forward_s=block_time["forward"] / n,
        block_backward_s=block_time["backward"] / n,
        other_forward_s=other_time["forward"],
        other_backward_s=other_time["backward"],
        optimizer_s=other_time["optimizer"],
        transient_bytes=transient_bytes(recorded),
        micro_batch=micro_batch,
        tokens_per_sample=tokens,
        precision=policy.name,
        optimizer=optimizer,
        param_shapes=recorded.param_shapes,
    )


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
):
    """Rank data/tensor/pipeline/ZeRO plans of `model` on `gpus` GPUs: memory
    per GPU, collectives, step time and throughput; fitting plans first."""
    from .parallel import interconnect_for, plans

    spec = get_gpu(gpu)
    policy = resolve_for(spec, precision)
    if gpus < 1 or gpus_per_node < 1:
        raise DlperfError("--gpus and --gpus-per-node must be positive")
    if node_network_bytes_per_s is not None and not 0 < node_network_bytes_per_s < math.inf:
        raise DlperfError("the inter-node network bandwidth must be a positive number")
    # The default inputs are traced at the micro-batch (1 unless given).
    default_batch = (micro_batch or 1) if inputs is None else None
    name, model, inputs = _resolve(model, inputs, default_batch, seq_len)
    first = _first_tensor(inputs)
    mb = micro_batch or (int(first.shape[0]) if first is not None and first.dim() else 1)
    batch = global_batch or 4 * gpus * mb
    profile = _profile(model, inputs, name, spec, policy, optimizer, mb)
    net = interconnect_for(spec, min(gpus_per_node, gpus), node_network_bytes_per_s)
    if measured_interconnect:  # measured by `dlperf measure-comm`: one link for all groups
        from dataclasses import replace

        bandwidth = measured_interconnect["bandwidth_bytes_per_s"]
        net = replace(
            net,
            intra_node_bytes_per_s=bandwidth,
            inter_node_bytes_per_s=bandwidth,
            latency_s=measured_interconnect.get("latency_s", net.latency_s),
        )
    ranked = plans(profile, spec, net, gpus, batch)
    if not ranked:
        raise DlperfError(
            f"no plan divides global batch {batch} into micro-batches of {mb} over {gpus} GPUs; "
            "pick --global-batch as a multiple of gpus x micro-batch"
        )
    return PlanReport(
        model=name,
        gpu=spec.id,
        gpus=gpus,
        gpus_per_node=net.gpus_per_node,
        global_batch=batch,
        micro_batch=mb,
        precision=policy.name,
        params=profile.params,
        plans=ranked,
    )


class PlanReport:
    def __init__(self, **fields):
        self.__dict__.update(fields)

    @property
    def best(self):
        return self.plans[0]

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "plans"}
        out["plans"] = [p.to_dict() for p in self.plans]
        return out


def profile_trace(path, gpu: str | HardwareSpec | None = None):
    """Read a PyTorch profiler trace of a real GPU run (`dlperf trace`)."""
    from .measurement.trace_report import analyze_profile

    return analyze_profile(path, gpu)


def measure(
    model,
    inputs=None,
    device: str = "cpu",
    precision: str = "fp32",
    training: bool = True,
    batch: int | None = None,
    seq_len: int | None = None,
    steps: int = 3,
    gpu: str | None = None,
):
    """Run the model for real on `device` and compare each op with its prediction.

    The prediction uses the device's own spec (the CPU is probed once). The
    model and inputs given are not changed: a copy runs. `gpu` is refused
    unless it names the device at hand: nothing runs on a GPU that is not here.
    """
    from .measurement.run import measure_model

    if device not in ("cpu", "cuda"):
        raise DlperfError(f"unknown device {device!r}; use cpu or cuda")
    if gpu is not None and not (device == "cpu" and str(gpu).lower() in ("cpu", "local")):
        raise DlperfError(
            f"measure runs on this machine's device, not on --gpu {gpu}: drop --gpu and "
            "choose --device cpu or cuda (to predict another GPU, use dlperf analyze --gpu)"
        )
    loaded = resolve_model(model, inputs, batch, seq_len)
    name, module, inputs = loaded.name, loaded.module, loaded.inputs
    if device == "cpu":
        spec = get_gpu("cpu")
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
    predicted = analyze(
        module, inputs, gpu=spec, precision=policy, training=training, optimizer="adamw"
    )
    # A model named or built without weights runs with real, initialised ones:
    # rebuilt by its loader, since a meta model's custom parameters have no
    # reset_parameters to refill them.
    runnable = module
    if loaded.build_real and any(p.is_meta for p in module.parameters()):
        runnable = loaded.build_real()
    return measure_model(name, runnable, inputs, predicted, device, policy, training, steps)


def report(analysis, path, memory=None, advice=None, measurement=None) -> str:
    """Write the HTML report of an analysis (and optional memory, advice and
    measurement) to `path`; returns the path."""
    from pathlib import Path

    from .rendering.html import render

    page = render(analysis, memory, advice, measurement)
    try:
        Path(path).write_text(page)
    except OSError as err:
        raise DlperfError(f"cannot write {path}: {err.strerror or err}") from None
    return str(path)
