"""Memory of one training step per GPU, from the traced model.

Persistent state per parameter (the seeds' table): fp32 training keeps 4 B of
weights and 4 B of gradients; mixed precision keeps fp32 master weights and
a half-precision copy (6 B) with fp32 gradients (4 B); pure fp16/bf16
training keeps 2 B + 2 B. Optimizer states: AdamW 8 B (two fp32 moments),
SGD with momentum 4 B, plain SGD none, 8-bit Adam 2 B, Adafactor a factored
second moment (one row and one column per matrix, counted from the shapes).

Activations are exactly the tensors autograd saved for backward in the
fake-tensor trace (one count per distinct storage, parameters excluded),
attributed to the module that ran when they were saved. Autocast's weight
copies are counted with the weights (the 2 B of the 6 B above), not twice.

The peak is the largest of: the end of forward (state + activations), the
backward pass (state + activations + gradients + the largest transient of
one backward op: an upper bound, since activations are freed as gradients
are made), and the optimizer step (state + gradients).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from .errors import DlperfError
from .hardware import HardwareSpec
from .optimizer import OPTIMIZERS, state_bytes  # noqa: F401  (OPTIMIZERS re-exported)
from .tracing import Trace, within

# Framework overhead, stated constants (not measured here): the CUDA context
# with PyTorch's kernels loaded; cuBLAS workspaces (larger on Hopper and later);
# allocator rounding and fragmentation as a share of the activation memory.
CUDA_CONTEXT_BYTES = 500 * 2**20
CUBLAS_WORKSPACE_BYTES = {"hopper": 32 * 2**20, "blackwell": 32 * 2**20}
DEFAULT_CUBLAS_WORKSPACE_BYTES = 4 * 2**20
ALLOCATOR_SLACK = 0.05

CHECKPOINT_HELP = "none, blocks, every:K or sqrt"


def state_bytes_per_param(precision_name: str) -> tuple[int, int]:
    """(weight bytes, gradient bytes) per parameter under a precision policy."""
    if precision_name.startswith("amp-"):
        return 6, 4
    if precision_name in ("fp16", "bf16"):
        return 2, 2
    return 4, 4


def master_word_bytes(precision_name: str) -> int:
    """Bytes per element of the weights the optimizer updates (and of its states)."""
    return 2 if precision_name in ("fp16", "bf16") else 4


def optimizer_bytes(
    optimizer: str, params: int, shapes: list[tuple[int, ...]], word_bytes: int = 4
) -> int:
    """Optimizer states (`optimizer.state_bytes`, the one table)."""
    return state_bytes(optimizer, params, shapes, word_bytes)


def overhead_bytes(spec: HardwareSpec, activations: float) -> int:
    if spec.kind == "cpu":
        return int(ALLOCATOR_SLACK * activations)
    workspace = CUBLAS_WORKSPACE_BYTES.get(spec.architecture, DEFAULT_CUBLAS_WORKSPACE_BYTES)
    return int(CUDA_CONTEXT_BYTES + workspace + ALLOCATOR_SLACK * activations)


@dataclass
class CheckpointPlan:
    """Activation memory and recompute cost of one checkpointing policy."""

    policy: str
    activations_bytes: int
    recompute_s: float
    segments: int


def parse_checkpoint(text: str) -> tuple[str, int]:
    text = (text or "none").lower()
    if text in ("none", "blocks", "sqrt"):
        return text, 1
    kind, _, k = text.partition(":")
    if kind == "every" and k.isdigit() and int(k) >= 1:
        return "every", int(k)
    raise DlperfError(f"unknown checkpoint policy {text!r}; use {CHECKPOINT_HELP}")


def checkpoint_plan(trace: Trace, policy: str, forward_time: dict[str, float]) -> CheckpointPlan:
    """Activations when the repeated blocks are checkpointed in segments.

    A checkpointed segment keeps only its input; its own activations come back,
    one segment at a time, when backward recomputes its forward.
    """
    kind, k = parse_checkpoint(policy)
    total = trace.activation_bytes
    blocks = trace.blocks
    if kind == "none" or not blocks:
        return CheckpointPlan(
            "none" if kind == "none" else f"{policy} (no repeated blocks)", total, 0.0, 0
        )
    per_block = {b: 0 for b in blocks}
    outside = 0
    for t in trace.saved:
        if t.kind != "activation":
            continue
        owner = next((b for b in blocks if within(t.module, b)), None)
        if owner is None:
            outside += t.nbytes
        else:
            per_block[owner] += t.nbytes
    if kind == "sqrt":
        k = max(1, math.ceil(math.sqrt(len(blocks))))
    elif kind == "blocks":
        k = 1
    segments = [blocks[i : i + k] for i in range(0, len(blocks), k)]
    kept = sum(trace.module_inputs.get(seg[0], 0) for seg in segments)
    largest = max(sum(per_block[b] for b in seg) for seg in segments)
    recompute = sum(forward_time.get(b, 0.0) for b in blocks)
    return CheckpointPlan(
        f"{kind}" + (f":{k}" if kind == "every" else ""),
        int(outside + kept + largest),
        recompute,
        len(segments),
    )


@dataclass
class MemoryReport:
    model: str
    gpu: str
    precision: str
    optimizer: str
    checkpoint: str
    accumulate: int
    batch: int
    micro_batch: int
    params: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    transient_bytes: int
    overhead_bytes: int
    peak_bytes: int
    peak_phase: str
    capacity_bytes: int
    recompute_s: float = 0.0
    max_batch: int | None = None
    max_seq_len: int | None = None
    by_module: dict[str, int] = field(default_factory=dict)
    policies: list[dict] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @staticmethod
    def term_names() -> tuple[str, ...]:
        """The terms `step_memory` computes that the report carries as they are."""
        return (
            "weights_bytes",
            "gradients_bytes",
            "optimizer_bytes",
            "activations_bytes",
            "transient_bytes",
            "overhead_bytes",
            "peak_bytes",
            "peak_phase",
        )

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["fits"] = self.fits
        return out


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
    out: dict[str, int] = {}
    for t in trace.saved:
        if t.kind != "activation":
            continue
        key = ".".join(t.module.split(".")[:depth]) if t.module else "(model)"
        out[key] = out.get(key, 0) + t.nbytes
    return dict(sorted(out.items(), key=lambda kv: kv[1], reverse=True))


def step_memory(
    trace: Trace,
    spec: HardwareSpec,
    optimizer: str,
    checkpoint: str,
    forward_time: dict[str, float],
) -> dict:
    """The memory terms of one step, for a trace at the micro-batch size."""
    w_per, g_per = state_bytes_per_param(trace.precision.name)
    weights = w_per * trace.params
    grads = g_per * trace.trainable_params
    states = (
        optimizer_bytes(
            optimizer,
            trace.trainable_params,
            trace.param_shapes,
            master_word_bytes(trace.precision.name),
        )
        if trace.training
        else 0
    )
    plan = checkpoint_plan(trace, checkpoint, forward_time)
    acts = plan.activations_bytes
    transient = transient_bytes(trace)
    overhead = overhead_bytes(spec, acts + transient)
    persistent = weights + states + overhead
    phases = {
        "forward": persistent + acts,
        "backward": persistent + acts + grads + transient,
        "optimizer": persistent + grads,
    }
    peak_phase = max(phases, key=phases.get)
    return {
        "weights_bytes": weights,
        "gradients_bytes": grads,
        "optimizer_bytes": states,
        "activations_bytes": acts,
        "transient_bytes": transient,
        "overhead_bytes": overhead,
        "peak_bytes": phases[peak_phase],
        "peak_phase": peak_phase,
        "recompute_s": plan.recompute_s,
        "policy": plan.policy,
    }


def resize_inputs(inputs, batch: int | None = None, seq_len: int | None = None):
    """Meta tensors like `inputs` with dim 0 = batch (and dim 1 = seq_len for
    integer token tensors), for tracing the same model at another size."""

    def resize(t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        shape = list(t.shape)
        if batch:
            shape[0] = batch
        if seq_len and t.dim() >= 2 and not t.is_floating_point():
            shape[1] = seq_len
        return torch.empty(shape, dtype=t.dtype, device="meta")

    if isinstance(inputs, dict):
        return {k: resize(v) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(resize(v) for v in inputs)
    return resize(inputs)


# -- one run's memory report ------------------------------------------------------

CHECKPOINT_WHAT_IFS = ("none", "blocks", "sqrt")


def block_times(analysis, blocks: list[str], phase: str) -> dict[str, float]:
    """Predicted time of each repeated block's ops in one phase."""
    times: dict[str, float] = {}
    for row in analysis.rows:
        if row.phase != phase:
            continue
        for block in blocks:
            if within(row.module, block):
                times[block] = times.get(block, 0.0) + row.time_s
    return times


def memory_report(run, session, checkpoint: str = "none", accumulate: int = 1, fit: bool = False):
    """The memory of one training step of `run` per GPU (see `dlperf.memory`)."""
    parse_checkpoint(checkpoint)
    full_batch = run.batch
    if accumulate < 1 or full_batch % accumulate:
        raise DlperfError(
            f"--accumulate {accumulate} must divide the batch {full_batch} into equal micro-batches"
        )
    micro = full_batch // accumulate
    step = run if accumulate == 1 else run.with_inputs(resize_inputs(run.inputs, batch=micro))
    step = dataclasses.replace(step, training=True)
    recorded = session.trace(step)
    forward = block_times(session.analysis(step, with_optimizer=False), recorded.blocks, "forward")
    terms = step_memory(recorded, run.spec, run.optimizer, checkpoint, forward)
    policies = []
    for option in CHECKPOINT_WHAT_IFS:  # priced on the same trace
        alt = (
            terms
            if option == checkpoint
            else step_memory(recorded, run.spec, run.optimizer, option, forward)
        )
        policies.append(
            {
                "checkpoint": alt["policy"],
                "activations_bytes": alt["activations_bytes"],
                "peak_bytes": alt["peak_bytes"],
                "recompute_s": alt["recompute_s"],
                "fits": alt["peak_bytes"] <= run.spec.memory_bytes,
            }
        )
    report = MemoryReport(
        model=run.name,
        gpu=run.spec.id,
        precision=run.precision.name,
        optimizer=run.optimizer,
        checkpoint=terms["policy"],
        accumulate=accumulate,
        batch=full_batch,
        micro_batch=micro,
        params=recorded.params,
        capacity_bytes=run.spec.memory_bytes,
        recompute_s=terms["recompute_s"],
        by_module=by_module(recorded),
        policies=policies,
        **{k: terms[k] for k in MemoryReport.term_names()},
    )
    if fit:
        report.max_batch, report.max_seq_len = _fit(step, session, checkpoint)
    return report


def _fit(step, session, checkpoint: str) -> tuple[int, int | None]:
    """The largest batch, and for token models the longest sequence, that fit."""
    capacity = step.spec.memory_bytes

    def peak_at(inputs) -> int:  # the peak needs no timing
        recorded = session.trace(step.with_inputs(inputs))
        return step_memory(recorded, step.spec, step.optimizer, checkpoint, {})["peak_bytes"]

    max_batch = largest(lambda b: peak_at(resize_inputs(step.inputs, batch=b)), capacity)
    if not step.token_inputs:
        return max_batch, None
    max_seq = largest(
        lambda s: peak_at(resize_inputs(step.inputs, seq_len=s)),
        capacity,
        step=64,
        limit=step.model.max_positions or 1 << 20,  # no longer than its position table
    )
    return max_batch, max_seq


def largest(peak_at, capacity: int, step: int = 1, limit: int = 1 << 20) -> int:
    """The largest size (a multiple of `step`, at most `limit`) whose peak fits
    in `capacity`; 0 when not even `step` fits.

    Memory grows with size (linearly in the batch; with the square of the
    sequence under explicit attention), so doubling then bisecting finds it
    with about 2 log2(size) traces.
    """

    def fits(size):
        return size <= limit and peak_at(size) <= capacity

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
