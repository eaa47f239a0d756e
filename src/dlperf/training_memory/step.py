"""The memory terms of one training step per GPU, from its trace.

Persistent state per parameter: fp32 training keeps 4 B of weights and 4 B of
gradients; mixed precision keeps fp32 master weights and a half-precision
copy (6 B) with fp32 gradients (4 B); pure fp16/bf16 training keeps 2 B +
2 B (`Precision` says which). Optimizer states come from `optimizer.py`, the
one table. The framework's own memory (CUDA context, cuBLAS workspace) is
spec data, per architecture family (`hardware/specs/_framework_memory.toml`).
What the caching allocator reserves beyond the live tensors comes from
replaying the step's allocations through its rules (`reserved.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..checkpointing import checkpoint_plan
from ..hardware import HardwareSpec
from ..hardware.framework import architecture_table
from ..hardware.spec import SPECS_DIR
from ..kinds import Phase, module_at_depth
from ..optimizer import state_bytes
from ..precision import Precision, precision
from ..tracing import OpEvent, Trace
from .reserved import step_peaks

FRAMEWORK_MEMORY_FILE = SPECS_DIR / "_framework_memory.toml"


@dataclass(frozen=True)
class FrameworkMemory:
    """What the framework takes on a device of one architecture family."""

    cuda_context_bytes: int
    cublas_workspace_bytes: int


@functools.cache
def framework_memory(architecture: str) -> FrameworkMemory:
    return FrameworkMemory(**architecture_table(FRAMEWORK_MEMORY_FILE, architecture))


CUDA_CONTEXT_BYTES = framework_memory("default").cuda_context_bytes


def overhead_bytes(spec: HardwareSpec) -> int:
    """The framework's own memory on `spec`: the CUDA context (the user's figure
    where `--cuda-context` gives one) and cuBLAS's workspace."""
    framework = framework_memory(spec.architecture)
    context = spec.cuda_context_bytes
    if context is None:
        context = framework.cuda_context_bytes
    return context + framework.cublas_workspace_bytes


def state_bytes_per_param(policy: str | Precision) -> tuple[int, int]:
    """(weight bytes, gradient bytes) per parameter under a precision policy:
    the masters plus autocast's half-precision copy, and the gradients."""
    policy = precision(policy)
    return policy.master_weight_bytes + policy.cast_weight_bytes, policy.grad_bytes


def optimizer_bytes(
    optimizer: str, params: int, shapes: list[tuple[int, ...]], word_bytes: int = 4
) -> int:
    """Optimizer states (`optimizer.state_bytes`, the one table)."""
    return state_bytes(optimizer, params, shapes, word_bytes)


def transient_bytes(trace: Trace) -> int:
    """The largest working set of one backward op: its outputs and incoming gradient."""
    largest = 0
    for e in trace.events:
        if e.phase != "backward":
            continue
        inputs = e.tensors()
        incoming = inputs[0].nbytes if inputs else 0
        largest = max(largest, incoming + sum(o.nbytes for o in e.outputs))
    return largest


def by_module(trace: Trace, depth: int = 2) -> dict[str, int]:
    """Saved activations per module path, cut at `depth` levels, largest first."""
    out: dict[str, int] = {}
    for t in trace.saved:
        if t.kind != "activation":
            continue
        key = module_at_depth(t.module, depth)
        out[key] = out.get(key, 0) + t.nbytes
    return dict(sorted(out.items(), key=lambda kv: kv[1], reverse=True))


@dataclass(frozen=True)
class StepMemory:
    """The memory terms of one step under one checkpointing policy.

    The allocated peak is the largest of: the end of forward (state +
    activations), the backward pass (state + activations + gradients + the
    largest transient of one backward op: an upper bound, since activations
    are freed as gradients are made), and the optimizer step (state +
    gradients). The caching allocator reserves `allocator_bytes` more
    (`reserved.step_peaks`); the framework (`overhead_bytes`: CUDA context,
    cuBLAS workspace) comes on top. `peak_bytes`, what `nvidia-smi` shows and
    what must fit, is reserved plus the framework.
    """

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    transient_bytes: int
    overhead_bytes: int
    recompute_s: float  # forward work backward runs again (`checkpointing.with_recompute`)
    checkpoint: str  # the policy as priced ("full", "selective", "every:2", ...)
    allocator_bytes: int = 0  # reserved by the caching allocator beyond the live tensors

    @property
    def phases(self) -> dict[Phase, int]:
        """Memory in use at the end of forward, in backward, and in the optimizer step."""
        persistent = self.weights_bytes + self.optimizer_bytes + self.overhead_bytes
        held = persistent + self.activations_bytes
        return {
            Phase.FORWARD: held,
            Phase.BACKWARD: held + self.gradients_bytes + self.transient_bytes,
            Phase.OPTIMIZER: persistent + self.gradients_bytes,
        }

    @property
    def peak_phase(self) -> Phase:
        phases = self.phases
        return max(phases, key=phases.get)

    @property
    def allocated_bytes(self) -> int:
        """The live tensors at their peak (`torch.cuda.max_memory_allocated`)."""
        return self.phases[self.peak_phase] - self.overhead_bytes

    @property
    def reserved_bytes(self) -> int:
        """The caching allocator's segments at their peak (`max_memory_reserved`)."""
        return self.allocated_bytes + self.allocator_bytes

    @property
    def peak_bytes(self) -> int:
        """Reserved plus the framework's own memory: the GPU memory the step takes."""
        return self.reserved_bytes + self.overhead_bytes


def step_memory(
    trace: Trace,
    spec: HardwareSpec,
    optimizer: str,
    checkpoint: str,
    price: Callable[[list[OpEvent]], float] | None = None,
    accumulate: int = 1,
) -> StepMemory:
    """The memory terms of one step, for a trace at the micro-batch size and
    `accumulate` micro-batches a step; `price` gives the seconds of the
    recompute events (None: not priced)."""
    policy = trace.precision
    w_per, g_per = state_bytes_per_param(policy)
    weights = w_per * trace.params
    grads = g_per * trace.trainable_params
    states = 0
    if trace.training:
        n, shapes = trace.trainable_params, trace.trained_shapes
        states = optimizer_bytes(optimizer, n, shapes, policy.master_weight_bytes)
    plan = checkpoint_plan(trace, checkpoint, price)
    acts = plan.activations_bytes
    transient = transient_bytes(trace)
    overhead = overhead_bytes(spec)
    reserve = 0
    if spec.kind != "cpu":  # the CUDA caching allocator's; a CPU's allocator returns memory
        capacity = spec.memory_bytes - overhead if spec.memory_bytes else None
        reserve = step_peaks(trace, optimizer, checkpoint, accumulate, capacity).overhead_bytes
    return StepMemory(
        weights,
        grads,
        states,
        acts,
        transient,
        overhead,
        plan.recompute_s,
        plan.policy,
        reserve,
    )
