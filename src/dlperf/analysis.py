"""Trace + costs + timings -> Analysis: per op, per module, per category, per phase.

Every recorded call is costed by the op registry and timed by
`pricing.time` on the device: GEMM-backed ops (matmuls, convolutions,
attention, recurrent layers) by the GEMM model, the rest as memory-bound
kernels with the small-tensor plateau. Ops no handler knows are listed in
`unsupported_ops` and priced as memory-bound on their inputs and outputs,
never as free. Every aggregate is a sum over the rows (`tally`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .checkpointing import with_recompute
from .compiling import FusionSummary, fuse
from .dtypes import name_of
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware.calibration import layer_keys
from .jsonable import fields_dict, jsonable
from .kernels.energy import step_energy
from .kernels.host import HostTimeline, issue_timeline
from .kernels.losses import Loss
from .kernels.pricing import (
    CPU_FRESH_PAGES_BYTES,
    RANDOM_OPS,
    GemmRow,
    GemmTimer,
    Timing,
    first_touch_s,
    random_s,
    time,
)
from .kernels.roofline import arithmetic_intensity
from .kinds import Bound, Category, LossKind, Phase
from .ops import CATEGORIES, Cost, CostContext, Costed, costed, fallback
from .ops.float8 import fused_input_casts, weights_once_per_step
from .optimizer import (
    clip_grad_cost,
    grad_scaler_cost,
    optimizer_cost,
    uses_loss_scaling,
    zero_grad_cost,
)
from .tracing import Trace

__all__ = ["Analysis", "GemmRow", "OpRow", "Tally", "analyze_trace", "price_cost", "tally"]

# The trace report and the advice price costs by this name.
price_cost = time


# How the host issues an op: the host model's input, not a figure of the report.
_HOST_ONLY = {"json": False}


@dataclass
class OpRow:
    module: str
    op: str
    phase: Phase
    category: Category
    family: str
    shapes: list[list[int]]
    dtype: str
    flops: float
    bytes: float
    arithmetic_intensity: float
    bound: Bound
    time_s: float
    kernels: int
    layout: str = ""
    gemms: list[GemmRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    supported: bool = True
    losses: tuple[Loss, ...] = ()
    # Framework calls the host makes for the op (a per-parameter optimizer loop: many),
    # and whether the host then waits for the GPU (reads a value back).
    host_ops: int = field(default=1, metadata=_HOST_ONLY)
    host_sync: bool = field(default=False, metadata=_HOST_ONLY)

    @property
    def gemm_flops(self) -> float:
        """FLOPs of the op's GEMMs alone (no bias, softmax or gate arithmetic)."""
        return sum(2.0 * g.m * g.n * g.k * g.batch * g.count for g in self.gemms)

    def to_dict(self) -> dict:
        """The fields, with the GEMMs and losses last: the order the JSON has always had."""
        return fields_dict(self, last=("gemms", "losses"))


@dataclass
class Tally:
    """Sums over rows: what every aggregate of an analysis adds up."""

    flops: float = 0
    bytes: float = 0
    time_s: float = 0
    kernels: int = 0
    ops: int = 0

    def add(self, row: OpRow) -> None:
        self.flops += row.flops
        self.bytes += row.bytes
        self.time_s += row.time_s
        self.kernels += row.kernels
        self.ops += 1

    def pick(self, *names: str, as_float: bool = False) -> dict:
        return {n: float(getattr(self, n)) if as_float else getattr(self, n) for n in names}


def tally(
    rows: Iterable[OpRow], keys: Callable[[OpRow], Iterable[str]] = lambda r: ("",)
) -> dict[str, Tally]:
    """Rows summed per key (`keys(row)` names every group a row counts in), in
    the order the keys first appear."""
    out: dict[str, Tally] = {}
    for r in rows:
        for key in keys(r):
            if key not in out:
                out[key] = Tally()
            out[key].add(r)
    return out


def _module_prefixes(depth: int) -> Callable[[OpRow], list[str]]:
    def keys(r: OpRow) -> list[str]:
        parts = r.module.split(".") if r.module else ["(model)"]
        return [".".join(parts[:level]) for level in range(1, min(depth, len(parts)) + 1)]

    return keys


@dataclass
class Analysis:
    model: str
    gpu: str
    precision: str
    training: bool
    params: int
    batch: int
    tokens: int
    rows: list[OpRow]
    unsupported_ops: dict[str, int]
    spec: HardwareSpec = field(repr=False)
    optimizer: str = "adamw"
    view_ops: int = 0
    # How the step runs, and the host issuing it (None: the plain sum of the rows).
    checkpoint: str = "none"
    host: HostTimeline | None = None
    fusion: FusionSummary | None = None
    # A training step's memory on the GPU: {"peak_bytes", "gpu_bytes", "fits"}
    # (`training_memory.step_memory`, the run's own checkpointing); None for inference.
    memory: dict | None = None

    # -- aggregates: sums over the rows ------------------------------------
    @property
    def totals(self) -> dict:
        whole = tally(self.rows).get("", Tally())
        return whole.pick("flops", "bytes", "time_s", "kernels")

    @property
    def time_s(self) -> float:
        """The GPU's busy time: the sum of the rows' predicted times."""
        return sum(r.time_s for r in self.rows)

    @property
    def step_time_s(self) -> float:
        """The step as it runs: the GPU's kernels, and its waits while the host
        issues them (`host.issue_timeline`)."""
        return self.host.step_s if self.host else self.time_s

    @property
    def phases(self) -> dict:
        found = tally(self.rows, lambda r: (r.phase,))
        return {
            phase.value: found.get(phase, Tally()).pick("flops", "bytes", "time_s")
            for phase in Phase
            if phase in found or phase == Phase.FORWARD
        }

    @property
    def categories(self) -> dict:
        found = tally(self.rows, lambda r: (r.category,))
        order = [*CATEGORIES, *(c for c in found if c not in CATEGORIES)]
        return {str(c): found.get(c, Tally()).pick("flops", "time_s", as_float=True) for c in order}

    def modules(self, depth: int = 2) -> dict[str, dict]:
        """Time and FLOPs per module path, cut at `depth` levels."""
        found = tally(self.rows, _module_prefixes(depth))
        out = {}
        for key, t in found.items():
            out[key] = {**t.pick("flops", "time_s", as_float=True), "ops": t.ops}
        return out

    @property
    def contraction_dtype(self) -> str:
        weight = Counter()
        for r in self.rows:
            if r.gemms:
                weight[r.dtype] += r.flops
        return weight.most_common(1)[0][0] if weight else "fp32"

    @property
    def mfu(self) -> float:
        """Model FLOPs utilization: contraction FLOPs per second over the peak of their dtype."""
        found = tally(self.rows, lambda r: (r.category,))
        flops = found[Category.CONTRACTION].flops if Category.CONTRACTION in found else 0
        dtype = self.contraction_dtype
        time_s = self.step_time_s
        if not time_s or not self.spec.has_dtype(dtype):
            return 0.0
        return flops / time_s / self.spec.peak_flops_per_s(dtype)

    @property
    def throughput(self) -> dict:
        time_s = self.step_time_s
        if not time_s:
            return {}
        out = {"samples_per_s": self.batch / time_s}
        if self.tokens:
            out["tokens_per_s"] = self.tokens / time_s
        return out

    @property
    def energy(self):
        """The step's joules on its GPU (`kernels.energy`); None on a CPU."""
        return step_energy(self)

    def run_totals(
        self, steps: int | None = None, tokens: int | None = None, price: float | None = None
    ) -> dict:
        """A run of `steps` steps (or enough for `tokens` tokens) on this GPU:
        its time, energy, and with `price` per GPU-hour its cost, per run,
        per step and per million tokens."""
        if tokens and not self.tokens:
            raise DlperfError(
                f"--tokens counts the token ids a step reads, and {self.model} reads none "
                "(its inputs are not token ids): give --steps"
            )
        if tokens:
            steps = math.ceil(tokens / self.tokens)
        steps = steps or 1
        energy = self.energy
        out = {"steps": steps, "time_s": steps * self.step_time_s}
        out["energy_j"] = steps * energy.joules if energy else None
        if price is not None:
            per_step = price * self.step_time_s / 3600
            out["cost"] = {"price_per_gpu_hour": price, "per_run": steps * per_step,
                           "per_step": per_step}  # fmt: skip
            if self.tokens:
                out["cost"]["per_million_tokens"] = per_step * 1e6 / self.tokens
        return out

    def top(self, n: int = 10) -> list[OpRow]:
        return sorted(self.rows, key=lambda r: r.time_s, reverse=True)[:n]

    def to_dict(self) -> dict:
        """The run, then the aggregates and the step, then every op: mostly figures
        computed from the rows, so the keys are named here."""
        run = ("model", "gpu", "precision", "training", "params", "batch")
        return {
            **{name: getattr(self, name) for name in run},
            "optimizer": self.optimizer if self.training else None,
            "totals": self.totals,
            "step_time_s": self.step_time_s,
            "checkpoint": self.checkpoint,
            "memory": self.memory,
            "compile": jsonable(self.fusion),
            "host": jsonable(self.host),
            "throughput": self.throughput,
            "mfu": self.mfu,
            "energy": jsonable(self.energy),
            "phases": self.phases,
            "categories": self.categories,
            "modules": self.modules(depth=2),
            "ops": jsonable(self.rows),
            "unsupported_ops": jsonable(self.unsupported_ops),
        }


def dtype_of(tensors: list, event, cost: Cost) -> str:
    """The dtype an op is reported (and priced) in: its GEMMs', else its first tensor's."""
    if cost.gemms:
        return cost.gemms[0].dtype
    ts = tensors or list(event.outputs)
    return name_of(ts[0].dtype, str(ts[0].dtype)) if ts else ""


def _layout(tensors: list) -> str:
    first = next((t for t in tensors if len(t.shape) == 4), None)
    if first is None:
        return ""
    return "NHWC" if first.channels_last else "NCHW"


_PHASES = {p.value: p for p in Phase}
# Losses said in an op's notes: those its GEMM rows do not show.
_NOTED = (LossKind.LAYOUT, LossKind.REREAD)


def op_row(event, tensors, found: Costed, timing: Timing, dtype: str, supported: bool) -> OpRow:
    """One priced op as the analysis reports it."""
    cost = found.cost
    notes = [loss.describe() for loss in timing.losses if loss.kind in _NOTED]
    if found.remarks:
        notes += found.remarks
    if timing.note:
        notes.append(timing.note)
    return OpRow(
        module=event.module,
        op=event.op,
        phase=_PHASES.get(event.phase, event.phase),
        category=found.category,
        family=found.family,
        shapes=[list(t.shape) for t in tensors],
        dtype=dtype,
        flops=cost.flops,
        bytes=timing.bytes,
        arithmetic_intensity=arithmetic_intensity(cost.flops, timing.bytes),
        bound=timing.bound,
        time_s=timing.seconds,
        kernels=cost.kernels,
        layout=_layout(tensors),
        gemms=list(timing.gemms),
        notes=notes,
        supported=supported,
        losses=timing.losses,
    )


def analyze_trace(
    trace: Trace,
    spec: HardwareSpec,
    model_name: str = "model",
    optimizer: str = "adamw",
    *,
    checkpoint: str = "none",
    compiled: bool = False,
    cuda_graphs: bool = False,
    clip_grad: bool = False,
) -> Analysis:
    """Every event of the trace costed and timed on `spec`, run the way the
    user runs it: `checkpoint` adds the forward work backward recomputes
    (phase "recompute"), `compiled` fuses element-wise chains as
    torch.compile does (`compiling.fuse`), `clip_grad` clips the gradients'
    norm before the optimizer step, and the host that issues the kernels
    sets the step's time (`host.issue_timeline`; `cuda_graphs` replays the
    step in one launch)."""
    priced, unsupported = _costed(trace, checkpoint)
    after = []  # the optimizer step, eager after the (compiled) forward and backward
    weight_casts = None
    if trace.training and trace.precision.fp8_linear:
        fmt = trace.precision.linear_format  # ops/float8.py
        priced, weight_casts = weights_once_per_step(fused_input_casts(priced, fmt), fmt)
    if trace.training and optimizer:
        if uses_loss_scaling(trace):  # unscaled before anything reads the gradients
            after.append(grad_scaler_cost(trace))
        if clip_grad:
            after.append(clip_grad_cost(trace, spec))
        after.append(optimizer_cost(trace, optimizer, spec))
        if weight_casts:  # fp8 weights cast from the updated masters
            after.append(weight_casts)
        zeroing = zero_grad_cost(trace, spec)
        if zeroing:  # before PyTorch 2.0: every gradient zeroed in place
            after.append(zeroing)
    fusion = None
    if compiled:
        # the same step unfused, for the report's side-by-side
        eager = _rows(priced + after, spec, unsupported, model_name, trace.params)
        priced, fusion = fuse(priced, trace)
        fusion.eager_step_s = issue_timeline(eager, spec, cuda_graphs=cuda_graphs).step_s
    rows = _rows(priced + after, spec, unsupported, model_name, trace.params)
    batch, tokens = _batch_and_tokens(trace)
    return Analysis(
        model=model_name,
        gpu=spec.id,
        precision=trace.precision.name,
        training=trace.training,
        params=trace.params,
        batch=batch,
        tokens=tokens,
        rows=rows,
        unsupported_ops=dict(unsupported),
        spec=spec,
        optimizer=optimizer,
        view_ops=trace.free_ops,  # the tracer counts the ops that move no data
        checkpoint=checkpoint if trace.training else "none",
        host=issue_timeline(rows, spec, cuda_graphs=cuda_graphs, compiled=compiled),
        fusion=fusion,
    )


def _rows(
    priced: list[tuple],
    spec: HardwareSpec,
    unsupported: Counter,
    model_name: str = "",
    params: int = 0,
) -> list[OpRow]:
    """Each priced event timed on `spec`, as the analysis' rows."""
    timer = GemmTimer(spec)
    timer.prepare([g for _, found in priced for g in found.cost.gemms])
    rows = []
    inputs = [event.tensors() for event, _ in priced]
    dtypes = [
        dtype_of(tensors, event, found.cost)
        for tensors, (event, found) in zip(inputs, priced, strict=True)
    ]
    layers = [None] * len(priced)
    if spec.calibration is not None and spec.calibration.layer_scales:
        idents = [
            (event.module, _PHASES.get(event.phase, event.phase), event.op, dtype)
            for (event, _), dtype in zip(priced, dtypes, strict=True)
        ]
        layers = layer_keys(model_name, params, idents)
    fresh = _fresh_page_bytes([event for event, _ in priced]) if spec.kind == "cpu" else None
    for i, ((event, found), tensors, dtype, layer) in enumerate(
        zip(priced, inputs, dtypes, layers, strict=True)
    ):
        extra = _cpu_extra_s(event, fresh[i], spec) if fresh else 0.0
        timing = time(found.cost, spec, dtype, timer, op=event.op, layer=layer, cpu_extra_s=extra)
        row = op_row(event, tensors, found, timing, dtype, event.op not in unsupported)
        if event.info:
            row.host_ops = event.info.get("host_ops", 1)
            row.host_sync = event.info.get("host_sync", False)
        rows.append(row)
    return rows


def _cpu_extra_s(event, fresh_bytes: int, spec: HardwareSpec) -> float:
    """What a CPU adds to the op's kernel: its fresh pages and random numbers."""
    drawn = event.outputs[0].numel if event.packet in RANDOM_OPS and event.outputs else 0
    return first_touch_s(fresh_bytes, spec) + random_s(drawn, spec)


def _fresh_page_bytes(events: list) -> list[int]:
    """Per event, the bytes of its outputs that a CPU allocates as fresh pages:
    storages of `CPU_FRESH_PAGES_BYTES` and up that no earlier op touched (a
    view or an in-place write reuses its storage; the first write into one an
    unrecorded factory made, `empty_like`, allocates it). A recomputed forward
    op allocates its outputs again: checkpointing freed them after forward."""
    seen: set[int] = set()
    out = []
    for event in events:
        fresh = 0
        again = event.phase == Phase.RECOMPUTE
        for meta, storage in zip(event.outputs, event.writes, strict=False):
            new = storage not in event.reads if again else storage not in seen
            if new and meta.nbytes >= CPU_FRESH_PAGES_BYTES:
                fresh += meta.nbytes
        seen.update(event.reads)
        seen.update(event.writes)
        out.append(fresh)
    return out


def _costed(trace: Trace, checkpoint: str) -> tuple[list[tuple], Counter]:
    """Each event (with the recomputed forward, when checkpointing) and its cost;
    events no handler knows are counted and priced by `fallback`."""
    events = trace.events
    if trace.training and checkpoint != "none":
        events = with_recompute(trace, checkpoint)
    ctx = CostContext(trace.precision)
    priced = []
    unsupported: Counter = Counter()
    for event in events:
        found = costed(event, ctx)
        if found is None:
            unsupported[event.op] += 1
            found = fallback(event)
        priced.append((event, found))
    return priced, unsupported


def _batch_and_tokens(trace: Trace) -> tuple[int, int]:
    if not trace.inputs:
        return 1, 0
    first = trace.inputs[0]
    batch = first.shape[0] if first.shape else 1
    tokens = first.numel if (not first.is_float and len(first.shape) == 2) else 0
    return batch, tokens
