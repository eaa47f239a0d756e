"""What would make a plan that does not fit fit: each remedy priced on the
same profile, the first (smallest) step of each kind that brings the GPU's
memory under its capacity.

- checkpointing: full (only the blocks' inputs stay), then selective;
- a smaller micro-batch: activations scale with it (an estimate from the
  traced micro-batch: every saved tensor of a transformer carries the batch
  dimension);
- sharding: zero1, zero2, fsdp over the same data-parallel ranks;
- more GPUs: data parallelism doubled up to 64 times, the per-GPU work kept
  (only sharded states shrink with it);
- more model parallelism on the same GPUs: tp or pp doubled, dp halved.
"""

from __future__ import annotations

import dataclasses

from ..hardware import HardwareSpec
from ..training_memory import parse_checkpoint
from .layout import Layout
from .memory import memory_per_gpu
from .profile import ModelProfile

MORE_GPUS_STEPS = 6  # up to 2^6 = 64 times the data parallelism
_ACTIVATION_FIELDS = (
    "block_activations_bytes",
    "block_split_bytes",
    "block_core_bytes",
    "block_input_bytes",
    "pre_activations_bytes",
    "post_activations_bytes",
    "post_split_bytes",
    "block_transient_bytes",
    "post_transient_bytes",
    "pre_transient_bytes",
)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _fits(profile: ModelProfile, spec: HardwareSpec, at: Layout) -> float | None:
    total = memory_per_gpu(profile, spec, at).total_bytes
    return total if total <= spec.memory_bytes else None


def at_micro_batch(profile: ModelProfile, micro_batch: int) -> ModelProfile:
    """The profile at another micro-batch, activations scaled with it (an estimate)."""
    scale = micro_batch / profile.micro_batch
    changes = {name: getattr(profile, name) * scale for name in _ACTIVATION_FIELDS}
    return dataclasses.replace(profile, micro_batch=micro_batch, **changes)


def _checkpointing(profile, spec, at) -> str | None:
    kind, _ = parse_checkpoint(profile.checkpoint)
    for policy in ("full", "selective"):
        if kind == policy or (kind == "every" and policy == "selective") or not profile.blocks:
            continue
        if policy == "selective" and not profile.block_core_bytes:
            continue
        found = _fits(dataclasses.replace(profile, checkpoint=policy), spec, at)
        if found:
            return f"--checkpoint {policy} ({_gib(found)})"
    return None


def _micro_batch(profile, spec, at) -> str | None:
    samples = at.micro_batch * at.micro_batches
    for smaller in range(at.micro_batch - 1, 0, -1):
        if samples % smaller:
            continue
        shrunk = at_micro_batch(profile, smaller)
        layout = dataclasses.replace(at, micro_batch=smaller, micro_batches=samples // smaller)
        found = _fits(shrunk, spec, layout)
        if found:
            return f"--micro-batch {smaller} (about {_gib(found)})"
    return None


def _sharding(profile, spec, at) -> str | None:
    if at.dp == 1:
        return None
    for sharding in ("zero1", "zero2", "fsdp"):
        layout = dataclasses.replace(at, sharding=sharding)
        if layout.zero <= at.zero:
            continue
        found = _fits(profile, spec, layout)
        if found:
            return f"--sharding {sharding} ({_gib(found)})"
    return None


def _more_gpus(profile, spec, at) -> str | None:
    for step in range(1, MORE_GPUS_STEPS + 1):
        dp = at.dp * 2**step
        found = _fits(profile, spec, dataclasses.replace(at, dp=dp))
        if found:
            return f"{dp * at.tp * at.pp * at.cp} GPUs at dp {dp} ({_gib(found)})"
    return None


def _model_parallel(profile, spec, at) -> str | None:
    if at.dp % 2:
        return None
    options = []
    if profile.tensor_parallel and at.tp * 2 <= at.gpus_per_node:
        options.append(("tp", dataclasses.replace(at, tp=at.tp * 2, dp=at.dp // 2)))
    if at.pp * 2 <= profile.blocks:
        options.append(("pp", dataclasses.replace(at, pp=at.pp * 2, dp=at.dp // 2)))
    for name, layout in options:
        found = _fits(profile, spec, layout)
        if found:
            return f"--{name} {getattr(layout, name)} ({_gib(found)})"
    return None


def remedies(profile: ModelProfile, spec: HardwareSpec, at: Layout) -> list[str]:
    """The remedies that make this plan fit, each at its smallest step."""
    found = []
    for remedy in (_checkpointing, _micro_batch, _sharding, _model_parallel, _more_gpus):
        text = remedy(profile, spec, at)
        if text:
            found.append(text)
    return found
