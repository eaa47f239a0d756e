"""Thin facade: the documented entry points, each handing off to one module."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .analysis import Analysis, analyze_trace
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .models import load_model
from .precision import precision as get_precision
from .trace import trace


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
    policy = get_precision(precision)
    name = type(model).__name__
    if isinstance(model, str):
        loaded = load_model(model, batch=batch, seq_len=seq_len)
        name, model = loaded.name, loaded.module
        inputs = loaded.inputs if inputs is None else inputs
    if inputs is None:
        raise DlperfError("no inputs given: pass a tensor of the input's shape (meta is fine)")
    recorded = trace(model, inputs, training=training, precision=policy, progress=progress)
    return analyze_trace(recorded, spec, model_name=name, optimizer=optimizer if training else "")


def _resolve(model, inputs, batch, seq_len):
    name = type(model).__name__
    if isinstance(model, str):
        loaded = load_model(model, batch=batch, seq_len=seq_len)
        name, model = loaded.name, loaded.module
        inputs = loaded.inputs if inputs is None else inputs
    if inputs is None:
        raise DlperfError("no inputs given: pass a tensor of the input's shape (meta is fine)")
    return name, model, inputs


def _first_tensor(inputs):
    import torch

    if isinstance(inputs, torch.Tensor):
        return inputs
    values = inputs.values() if isinstance(inputs, dict) else inputs
    return next((t for t in values if isinstance(t, torch.Tensor)), None)


def memory(
    model,
    inputs=None,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "amp-bf16",
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
    also finds the largest batch (and sequence length) that fits the GPU.
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
    policy = get_precision(precision)
    parse_checkpoint(checkpoint)
    if optimizer not in OPTIMIZERS:
        raise DlperfError(f"unknown optimizer {optimizer!r}; choose from: {', '.join(OPTIMIZERS)}")
    name, model, inputs = _resolve(model, inputs, batch, seq_len)
    first = _first_tensor(inputs)
    full_batch = int(first.shape[0]) if first is not None and first.dim() else 1
    if accumulate < 1 or full_batch % accumulate:
        raise DlperfError(
            f"--accumulate {accumulate} must divide the batch {full_batch} into equal micro-batches"
        )
    micro = full_batch // accumulate
    micro_inputs = resize_inputs(inputs, batch=micro) if accumulate > 1 else inputs

    def measure(step_inputs, policy_name=checkpoint):
        recorded = trace(model, step_inputs, training=True, precision=policy)
        timing = analyze_trace(recorded, spec, model_name=name, optimizer="")
        forward = {}
        for row in timing.rows:
            if row.phase == "forward":
                for block in recorded.blocks:
                    if row.module == block or row.module.startswith(block + "."):
                        forward[block] = forward.get(block, 0.0) + row.time_s
        return recorded, step_memory(recorded, spec, optimizer, policy_name, forward)

    recorded, terms = measure(micro_inputs)
    policies = []
    for option in ("none", "blocks", "sqrt"):
        _, alt = measure(micro_inputs, option) if option != checkpoint else (None, terms)
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
        report.max_batch = _largest(
            lambda b: measure(resize_inputs(inputs, batch=b))[1], spec.memory_bytes
        )
        if first is not None and first.dim() == 2 and not first.is_floating_point():
            report.max_seq_len = _largest(
                lambda s: measure(resize_inputs(micro_inputs, seq_len=s))[1],
                spec.memory_bytes,
                step=64,
            )
    return report


def _largest(peak_at, capacity: int, step: int = 1, limit: int = 1 << 20) -> int | None:
    """The largest size (a multiple of `step`) whose step fits in `capacity`.

    Memory grows with size (linearly in the batch; with the square of the
    sequence under explicit attention), so doubling then bisecting finds it
    with about 2 log2(size) traces.
    """

    def fits(size):
        return peak_at(size)["peak_bytes"] <= capacity

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
