"""One run's memory report: the step's terms at the micro-batch size, the
checkpointing what-ifs priced on the same trace, and the largest batch and
sequence that fit (`dlperf memory`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..analysis import analyze_trace
from ..checkpointing import kept_by_module, parse_checkpoint, same_policy
from ..errors import DlperfError
from ..jsonable import fields_dict
from ..models.inputs import resize_inputs
from ..tracing import OpEvent, Trace, within
from .fused import te_saved
from .partitioner import partitioned
from .step import StepMemory, step_memory

CHECKPOINT_WHAT_IFS = ("none", "selective", "selective-op", "full", "sqrt")
# A policy that frees less than this share of the activations is flagged: its
# recompute buys little (Korthikanti's attention core under a fused kernel).
FREES_LITTLE = 0.10


@dataclass(frozen=True)
class CheckpointOption:
    """One checkpointing what-if: its activations, peak and recompute time."""

    checkpoint: str
    activations_bytes: int
    peak_bytes: int
    recompute_s: float
    fits: bool
    frees_share: float = 0.0  # of the activations without checkpointing

    @property
    def frees_little(self) -> bool:
        """A policy that recomputes work yet frees under FREES_LITTLE."""
        return self.recompute_s > 0 and self.frees_share < FREES_LITTLE

    @classmethod
    def of(cls, step: StepMemory, capacity_bytes: int) -> CheckpointOption:
        peak = step.peak_bytes
        return cls(
            step.checkpoint, step.activations_bytes, peak, step.recompute_s, peak <= capacity_bytes
        )

    def __getitem__(self, key: str):
        """Read as the dict it used to be (`option["fits"]`), for older readers."""
        return getattr(self, key)


@dataclass(frozen=True, kw_only=True)
class MemoryReport(StepMemory):
    """`dlperf memory`: the step's terms at the micro-batch size (the fields and
    the peak of `StepMemory`), the run they describe, the checkpointing
    what-ifs, and with `fit` the largest batch and sequence that fit."""

    model: str
    gpu: str
    precision: str
    optimizer: str
    accumulate: int
    batch: int
    micro_batch: int
    params: int
    capacity_bytes: int
    max_batch: int | None = None
    max_seq_len: int | None = None
    # the model's positions, when they (not memory) stopped the sequence search
    max_seq_len_position_limit: int | None = None
    by_module: dict[str, int] = field(default_factory=dict)
    policies: list[CheckpointOption] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        """The run first (the fields before capacity_bytes), then the step's terms
        and peak, then the rest: the order the JSON has always had."""
        out = fields_dict(self)
        terms = {f.name: out.pop(f.name) for f in dataclasses.fields(StepMemory)}
        keys = list(out)
        run, rest = keys[: keys.index("capacity_bytes")], keys[keys.index("capacity_bytes") :]
        peak = {
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
        }
        # the verdict is on what the allocator reserves, with the framework beside it
        tail = {k: out[k] for k in rest} | {
            "fits": self.fits,
            "fits_on": "reserved_bytes + overhead_bytes",
        }
        return {k: out[k] for k in run} | terms | peak | tail


def saved_as_run(trace: Trace, run) -> Trace:
    """The trace with what `run` saves for backward: compiled, the partitioner's
    set; with Transformer Engine's kernels (`--kernels te`), theirs."""
    if getattr(run, "kernels", "eager") == "te":
        trace = te_saved(trace)
    return partitioned(trace) if run.compile and trace.training else trace


def recompute_price(trace: Trace, spec, compiled: bool = False) -> Callable[[list[OpEvent]], float]:
    """The seconds of recompute events on `spec`, priced as the analysis prices
    them (their phase changes nothing in an op's price; `compiled` fuses them
    as --compile does), so the memory report's recompute time is the
    analysis's recompute phase."""

    def price(events: list[OpEvent]) -> float:
        only = dataclasses.replace(trace, events=list(events), training=False)  # no optimizer row
        return analyze_trace(only, spec, compiled=compiled).time_s

    return price


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
    recorded = saved_as_run(session.trace(step), run)
    price = recompute_price(recorded, run.spec, run.compile)
    terms = step_memory(recorded, run.spec, run.optimizer, checkpoint, price, accumulate)
    capacity = run.spec.memory_bytes
    policies = [  # priced on the same trace
        CheckpointOption.of(
            terms
            if same_policy(option, checkpoint)
            else step_memory(recorded, run.spec, run.optimizer, option, price, accumulate),
            capacity,
        )
        for option in CHECKPOINT_WHAT_IFS
    ]
    plain = policies[0].activations_bytes  # "none"
    policies = [
        dataclasses.replace(p, frees_share=1 - p.activations_bytes / plain if plain else 0.0)
        for p in policies
    ]
    max_batch, max_seq = _fit(step, session, checkpoint) if fit else (None, None)
    positions = step.model.max_positions
    return MemoryReport(
        **vars(terms),
        model=run.name,
        gpu=run.spec.id,
        precision=run.precision.name,
        optimizer=run.optimizer,
        accumulate=accumulate,
        batch=full_batch,
        micro_batch=micro,
        params=recorded.params,
        capacity_bytes=capacity,
        by_module=kept_by_module(recorded, checkpoint),
        policies=policies,
        max_batch=max_batch,
        max_seq_len=max_seq,
        max_seq_len_position_limit=positions if max_seq and max_seq == positions else None,
    )


def _fit(step, session, checkpoint: str) -> tuple[int, int | None]:
    """The largest batch, and for token models the longest sequence, that fit."""
    capacity = step.spec.memory_bytes

    def peak_at(inputs) -> int:  # the peak needs no timing
        recorded = saved_as_run(session.trace(step.with_inputs(inputs)), step)
        return step_memory(recorded, step.spec, step.optimizer, checkpoint).peak_bytes

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
