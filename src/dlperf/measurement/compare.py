"""`dlperf compare`: the model's predicted ops beside a profiler trace of the
same model's run, per op, per module and per category.

The trace's calls are matched to the model's predicted rows
(`trace_match`). Time the model does not explain is still named: kernels
launched outside any model op (communication, the optimizer's kernels, a
library's own ops) by what their names say they are, and on a CPU the
framework's own work between ops as "host". `mapped_share` is the share of
the measured time that lands on a model op or a named category; what is
left is "unmapped". All times are per profiled step; an op's is the median
of its calls, one per step.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from dataclasses import dataclass, field

from ..errors import DlperfError
from ..hardware.calibration import layer_keys
from ..hardware.catalog import resolve_id
from ..jsonable import fields_dict, jsonable
from ..kernels.roofline import roofline_time_s
from ..kinds import module_at_depth
from ..optimizer import step_style
from .kineto import Kernel, TraceData, busy_time_us, kernel_spans
from .ranks import priced_collectives
from .trace_match import (
    FUSED_OPTIMIZER_CALL,
    OPTIMIZER,
    Call,
    anchored_calls,
    canonical,
    in_steps,
    match,
    optimizer_head,
    repeats,
    row_key,
    trace_name,
)

GEMM, ATTENTION, MEMORY, COMMUNICATION, HOST, UNMAPPED = (
    "gemm",
    "attention",
    "memory-bound",
    "communication",
    "host",
    "unmapped",
)
CLASSES = (GEMM, ATTENTION, MEMORY, COMMUNICATION, HOST, UNMAPPED)
# What kernels outside the model's ops are, by name (checked in this order).
_KERNEL_CLASSES = (
    (COMMUNICATION, re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter", re.I)),
    (ATTENTION, re.compile(r"flash|fmha|attention|attn", re.I)),
    (MEMORY, re.compile(r"bn_|batch_?norm|layer_?norm|rms_?norm|softmax|pool", re.I)),
    (
        GEMM,
        re.compile(
            r"gemm|cutlass|xmma|wgmma|gmma|conv|cudnn|dgrad|wgrad|winograd|implicit|"
            r"splitK|sm\d+_|(ampere|volta|turing|hopper|maxwell)_",
            re.I,
        ),
    ),
    (
        MEMORY,
        re.compile(
            r"elementwise|vectorized|unrolled|reduce|norm|copy|cat|index|scatter|gather|"
            r"embedding|dropout|distribution|fill|multi_tensor|adam|sgd|memcpy|memset|"
            r"transpose|permute|sort|topk|where|cast|triton_|fused|bias|relu|gelu|silu|"
            r"rotary|rope|loss|cross_entropy|split_embedding|quantize|scale",
            re.I,
        ),
    ),
)
_GEMM_OPS = re.compile(r"::(mm|addmm|bmm|baddbmm|matmul|linear|convolution\w*|_scaled_mm\w*)$")
_ATTENTION_OPS = re.compile(r"attention|flash|sdpa", re.I)


def kernel_class(name: str) -> str:
    for cls, pattern in _KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return UNMAPPED


def call_class(name: str) -> str:
    if _ATTENTION_OPS.search(name):
        return ATTENTION
    if _GEMM_OPS.search(name):
        return GEMM
    return MEMORY


def row_class(row) -> str:
    """The class `pricing.time` corrects a row's kernels as: attention calls,
    GEMM-backed ops, and the rest."""
    if "attention" in row.family:
        return ATTENTION
    return GEMM if row.gemms else MEMORY


@dataclass
class CompareRow:
    """One predicted op beside what the trace measured for it (per step)."""

    module: str
    op: str
    phase: str
    category: str  # one of CLASSES
    bound: str
    shapes: list
    flops: float
    bytes: float
    predicted_s: float
    measured_s: float
    calls: int  # trace calls averaged into measured_s
    kernels: int  # predicted kernels of the op
    roofline_s: float  # the plain roofline at the device's peak and bandwidth
    layer: str = ""  # its place in the model (`hardware.calibration.layer_keys`)
    # (op, layer) of the rows merged into this one: the optimizer phase's
    # unscale and clipping beside its update, each to take its factor
    merged: tuple = ()

    @property
    def ratio(self) -> float:
        """Measured over predicted: above 1, the run was slower than predicted."""
        return self.measured_s / self.predicted_s if self.predicted_s else float("inf")

    @property
    def fraction_of_roofline(self) -> float:
        return self.roofline_s / self.measured_s if self.measured_s else 0.0

    def to_dict(self) -> dict:
        # no prediction: a null ratio rather than JSON's missing infinity
        ratio = self.ratio if self.predicted_s else None
        roofline = self.fraction_of_roofline
        return fields_dict(self) | {"ratio": ratio, "fraction_of_roofline": roofline}


@dataclass
class Comparison:
    path: str
    gpu: str
    device: str | None  # the trace's own device name
    model: str
    steps: int
    predicted_step_s: float
    measured_step_s: float  # median profiled step (kernels' span on a GPU without step marks)
    measured_s: float  # the time the categories split: kernels' time, or ops' time on a CPU
    busy_s: float  # GPU: time at least one kernel runs; CPU: the ops' time
    idle_s: float  # GPU: the step's span less its busy time
    mapped_share: float
    rows: list[CompareRow] = field(default_factory=list)
    unmatched_rows: list[dict] = field(default_factory=list)  # predicted, not in the trace
    outside: list[dict] = field(default_factory=list)  # trace time on no model op, by name
    categories: dict = field(default_factory=dict)
    modules: list[dict] = field(default_factory=list)
    communication: dict = field(default_factory=dict)
    rank: int | None = None
    notes: list[str] = field(default_factory=list)  # what the reader should check first
    # of the matched ops, how many ran with other input shapes than predicted
    # (None: the trace recorded no shapes)
    other_shapes: int | None = None
    # the share of the predicted time on ops found in the trace as predicted: by
    # name and input shapes, of the ops that have inputs (by name alone, of every
    # op, where the trace recorded no shapes)
    matched_share: float = 0.0

    @property
    def misses(self) -> list[CompareRow]:
        """Rows by how much time the prediction misses, largest first."""
        return sorted(self.rows, key=lambda r: abs(r.measured_s - r.predicted_s), reverse=True)

    def to_dict(self, misses: int = 10) -> dict:
        """The fields with the rows last, then the `misses` largest misses."""
        out = fields_dict(self, last=("rows",))
        return out | {"misses": jsonable(self.misses[:misses])}


def row_layer_keys(analysis) -> list[str]:
    """Each of the analysis' rows' place in the model, in row order
    (`hardware.calibration.layer_keys`)."""
    idents = [(r.module, r.phase, r.op, r.dtype) for r in analysis.rows]
    return layer_keys(analysis.model, analysis.params, idents)


def compare_trace(analysis, data: TraceData, depth: int = 2) -> Comparison:
    """`analysis` (a dlperf Analysis of the model as the run ran it) beside `data`."""
    rows = [r for r in analysis.rows if r.time_s > 0 or r.flops or r.bytes]
    calls, orphans, kernels, steps = _in_steps(data, rows)
    taken, left = match(rows, calls, steps)
    spec = analysis.spec
    out_rows, unmatched, categories = _compare_rows(analysis, rows, taken, steps)
    if not out_rows:
        raise DlperfError(
            f"no op of {analysis.model} was found in {data.path}: is it a trace of this model, "
            "run with the same batch, sequence length and precision?"
        )
    outside = _outside(left, orphans, steps)
    for entry in outside:
        categories[entry["category"]]["measured_s"] += entry["measured_s"]
    total, busy, span, idle = _measured(data, kernels, calls, steps, categories, outside)
    measured_step = (
        statistics.median(d for _, d in data.step_spans) * 1e-6 if data.step_spans else span
    )
    mapped = total - categories[UNMAPPED]["measured_s"]
    other_shapes, matched_share = _shape_match(rows, taken, calls)
    return Comparison(
        data.path,
        spec.id,
        data.device_name,
        analysis.model,
        steps,
        analysis.step_time_s,
        measured_step,
        total,
        busy,
        idle,
        mapped / total if total else 0.0,
        out_rows,
        unmatched,
        sorted(outside, key=lambda e: e["measured_s"], reverse=True),
        {c: v for c, v in categories.items() if v["predicted_s"] or v["measured_s"]},
        _modules(out_rows, depth),
        communication_summary(kernels, spec, steps) if data.kernels else {},
        data.rank,
        _device_notes(spec, data) + _notes(rows, taken, calls) + _optimizer_notes(analysis, data),
        other_shapes,
        matched_share,
    )


def _shape_match(rows: list, taken: list, calls: list[Call]) -> tuple[int | None, float]:
    """(how many matched ops ran with other input shapes than predicted, or None
    where the trace recorded none; the share of the predicted time on ops
    matched with their shapes, or by name alone without recorded shapes)."""
    recorded = any(c.shapes is not None for c in calls)
    found, total, other = 0.0, 0.0, 0
    for row, mine in zip(rows, taken, strict=True):
        same = bool(mine) and mine[0].shapes == row_key(row.shapes)
        other += bool(mine) and recorded and not same
        if recorded and not row.shapes:
            continue  # an op without inputs (the optimizer's step, zeros) tells no model apart
        total += row.time_s
        found += row.time_s if mine and (same or not recorded) else 0.0
    return (other if recorded else None), (found / total if total else 0.0)


def ran_on_other_gpu(spec, data: TraceData) -> str | None:
    """The catalogue GPU a trace ran on where it is not `spec` (None: the same,
    or a trace that names none)."""
    name = data.device_name
    ran = resolve_id(name) if name and data.kernels else None
    if not ran:
        return None
    same = (
        spec.id == ran
        or spec.id.startswith(f"{ran}-calibrated")
        or name in spec.device_names
        or spec.name.split(" (calibrated")[0] == name
    )
    return None if same else ran


def _device_notes(spec, data: TraceData) -> list[str]:
    """A note when the trace ran on another GPU than the one it is priced on
    (`--gpu v100` beside an A100's trace): every op's error is then the two
    GPUs' difference as much as the model's."""
    ran = ran_on_other_gpu(spec, data)
    if ran is None:
        return []
    return [
        f"the trace ran on {data.device_name} ({ran}) but is priced as {spec.id}: each op's "
        f"error below is the two GPUs' difference as much as the model's (leave out --gpu to "
        f"price {ran})"
    ]


def _in_steps(data: TraceData, rows: list) -> tuple[list[Call], list, list, int]:
    """The calls of `rows`' ops, the kernels no call claims (orphans), every
    kernel, and the number of steps: all of them inside the profiled steps."""
    calls, orphans = anchored_calls(data, {trace_name(r.op) for r in rows})
    # time outside the profiled steps (before the first mark, after the last)
    # belongs to no step: left out of every per-step figure
    inside = in_steps(data)
    kernels = [k for k in data.kernels if inside(k)]
    orphans = [k for k in orphans if inside(k)]
    if data.step_spans:
        calls = [c for c in calls if c.step is not None]
    if data.kernels and not kernels:
        raise DlperfError(f"{data.path}: no GPU kernel was launched inside its profiled steps")
    steps = data.steps if data.step_spans else repeats(rows, calls)
    return calls, orphans, kernels, steps


def _compare_rows(analysis, rows: list, taken: list, steps: int):
    """The rows found in the trace beside their calls, the rows not found, and
    the predicted and measured seconds per category (CLASSES)."""
    layer_of = dict(zip(map(id, analysis.rows), row_layer_keys(analysis), strict=True))
    out_rows, unmatched = [], []
    categories = {c: {"predicted_s": 0.0, "measured_s": 0.0} for c in CLASSES}
    # the optimizer phase's rows (update, unscale, clipping) are one row, the
    # update's: every optimizer call (`match`) against the phase's predicted sums
    phase = [r for r in rows if trace_name(r.op) == OPTIMIZER]
    at = optimizer_head(rows)
    head = rows[at] if at is not None else None
    in_phase = {id(r) for r in phase}
    for row, mine in zip(rows, taken, strict=True):
        cls = row_class(row)
        categories[cls]["predicted_s"] += row.time_s
        if id(row) in in_phase and row is not head:
            continue
        layer, merged = layer_of[id(row)], ()
        if row is head:
            row, merged = _phase_row(head, phase, layer_of)
        if not mine:
            unmatched.append({"module": row.module, "op": row.op, "predicted_s": row.time_s})
            continue
        out = _compare_row(row, mine, cls, steps, analysis.spec, layer, merged)
        categories[cls]["measured_s"] += out.measured_s
        out_rows.append(out)
    return out_rows, unmatched, categories


def _phase_row(head, phase: list, layer_of: dict):
    """The optimizer phase as its update's row, its sums in place of the update's
    own, and the (op, layer) of the rows merged into it."""
    merged = tuple((r.op, layer_of[id(r)]) for r in phase if r is not head)
    row = dataclasses.replace(
        head, **{k: sum(getattr(r, k) for r in phase) for k in ("time_s", "flops",
                                                               "bytes", "kernels")}
    )  # fmt: skip
    return row, merged


def _compare_row(row, mine: list[Call], cls: str, steps: int, spec, layer, merged) -> CompareRow:
    """`row` beside its calls in the trace, `mine`, per step."""
    # a row's calls are one per step: their median, which a step slowed by
    # another process (or a first step's warm-up) does not move; the
    # optimizer's calls are all of each step's, their mean per step
    if trace_name(row.op) == OPTIMIZER:
        measured = sum(c.time_us for c in mine) * 1e-6 / steps
    else:
        measured = statistics.median(c.time_us for c in mine) * 1e-6
    dtype = row.dtype if row.dtype in spec.math else "fp32"
    roof = roofline_time_s(
        row.flops, row.bytes, spec.peak_flops_per_s(dtype), spec.memory_bandwidth_bytes_per_s
    )
    return CompareRow(
        row.module, row.op, str(row.phase), cls, str(row.bound), row.shapes,
        row.flops, row.bytes, row.time_s, measured, len(mine), row.kernels, roof,
        layer, merged,
    )  # fmt: skip


def _measured(data: TraceData, kernels: list, calls: list[Call], steps: int,
              categories: dict, outside: list[dict]) -> tuple[float, ...]:  # fmt: skip
    """Per step: the measured time the categories split, the busy time, the
    step's span and its idle time. On a CPU the framework's time between ops
    joins `categories` and `outside` as host time."""
    if data.kernels:
        total = sum(k.duration_us for k in kernels) * 1e-6 / steps
        busy = busy_time_us(kernels) * 1e-6 / steps
        first = min(k.start_us for k in kernels)
        last = max(k.start_us + k.duration_us for k in kernels)
        span = (last - first) * 1e-6 / steps
        return total, busy, span, max(0.0, span - busy)
    ops_s = sum(c.time_us for c in calls) * 1e-6 / steps
    host = _host_s(data, steps) - ops_s
    if host > 0:
        categories[HOST]["measured_s"] += host
        outside.append({"name": "(framework, between ops)", "category": HOST,
                        "measured_s": host, "calls": 0})  # fmt: skip
    busy = ops_s + max(0.0, host)
    return busy, busy, busy, 0.0


def _notes(rows: list, taken: list, calls: list[Call]) -> list[str]:
    """Warnings about the match itself: a trace without shapes, or one whose
    shapes are not the model's as given (another batch or sequence length)."""
    if not any(c.shapes is not None for c in calls):
        return [
            "the trace recorded no input shapes (record_shapes=False): ops were matched by name "
            "and order alone, so the batch and sequence length are only as given"
        ]
    matched = [(r, mine) for r, mine in zip(rows, taken, strict=True) if mine]
    same = sum(mine[0].shapes == row_key(r.shapes) for r, mine in matched)
    if matched and same < 0.5 * len(matched):
        return [
            f"only {same} of {len(matched)} matched ops ran with the input shapes predicted: "
            "the run's batch, sequence length or inputs differ from the options given "
            "(check --batch, --seq-len, --input)"
        ]
    return []


# torch.optim's foreach Adam(W) update (a model's own code rarely runs these)
_ADAM_FOREACH = ("aten::_foreach_lerp_", "aten::_foreach_addcdiv_")


def _optimizer_notes(analysis, data: TraceData) -> list[str]:
    """A note when the trace's optimizer ran fused and the prediction priced
    another style, or the other way round: each style issues its own number
    of framework calls and kernels, which the step and a calibration carry."""
    name = analysis.optimizer if analysis.training else None
    if not name or not any(r.op.startswith("optimizer.") for r in analysis.rows):
        return []
    ran = (FUSED_OPTIMIZER_CALL.match(op["name"]) for op in data.cpu_ops)
    fused = sorted({m.group(1) for m in ran if m})
    priced = step_style(name, analysis.spec)
    if fused and priced != "fused":
        fix = "--optimizer adamw-fused" if "adamw" in fused else "the optimizer that ran"
        return [
            f"the trace's optimizer ran fused (aten::_fused_{fused[0]}_) where {name} was priced "
            f"as {priced} calls: give {fix}"
        ]
    if not fused and priced == "fused" and any(op["name"] in _ADAM_FOREACH for op in data.cpu_ops):
        return [
            f"{name} was priced fused, but the trace ran no fused optimizer op and has "
            "torch.optim's foreach update ops: give --optimizer adamw (its default) or the "
            "optimizer that ran"
        ]
    return []


def _outside(left: list[Call], orphans: list[Kernel], steps: int) -> list[dict]:
    """Trace time on no predicted row, one entry per name and category."""
    found: dict[tuple, dict] = {}

    def add(name: str, cls: str, seconds: float):
        entry = found.setdefault(
            (name, cls), {"name": name, "category": cls, "measured_s": 0.0, "calls": 0}
        )
        entry["measured_s"] += seconds / steps
        entry["calls"] += 1

    for c in left:
        if c.kernels:  # each kernel by what it is: a model op's name may hide a copy
            for k in c.kernels:
                add(c.name, _class_of_kernel(k, c.name), k.duration_us * 1e-6)
        else:
            add(c.name, call_class(c.name), c.time_us * 1e-6)
    for k in orphans:
        op = canonical(k.op["name"]) if k.op else "(no launching op)"
        add(op, kernel_class(k.name), k.duration_us * 1e-6)
    return list(found.values())


def _class_of_kernel(k: Kernel, op: str) -> str:
    cls = kernel_class(k.name)
    return call_class(op) if cls == UNMAPPED else cls


def _host_s(data: TraceData, steps: int) -> float:
    """A CPU run's time per step: its profiled steps, else its top-level ops."""
    if data.step_spans:
        return sum(d for _, d in data.step_spans) * 1e-6 / len(data.step_spans)
    total = 0.0
    for ops in data.threads:
        end = float("-inf")
        for op in ops:  # sorted by start: the top level are those past the last end
            if op["ts"] >= end:
                total += op["dur"]
                end = op["ts"] + op["dur"]
    return total * 1e-6 / steps


def _modules(rows: list[CompareRow], depth: int) -> list[dict]:
    found: dict[str, dict] = {}
    for r in rows:
        key = module_at_depth(r.module, depth)
        entry = found.setdefault(key, {"module": key, "predicted_s": 0.0, "measured_s": 0.0})
        entry["predicted_s"] += r.predicted_s
        entry["measured_s"] += r.measured_s
    return sorted(found.values(), key=lambda e: e["measured_s"], reverse=True)


def communication_summary(kernels: list[Kernel], spec, steps: int) -> dict:
    """Communication kernels of one rank's trace: their time, the part no
    compute kernel overlaps (exposed), per step, and those whose size the
    trace records priced by dlperf's collective model (`ranks`)."""
    comm = [k for k in kernels if kernel_class(k.name) == COMMUNICATION]
    if not comm:
        return {}
    compute = [k for k in kernels if kernel_class(k.name) != COMMUNICATION]
    total = sum(k.duration_us for k in comm)
    exposed = _uncovered_us(comm, compute)
    return {
        "kernels": len(comm),
        "time_s": total * 1e-6 / steps,
        "exposed_s": exposed * 1e-6 / steps,
        **priced_collectives(comm, spec, steps),
    }


def _uncovered_us(kernels: list[Kernel], cover: list[Kernel]) -> float:
    """Time of the union of `kernels` that no kernel of `cover` runs beside."""
    spans, covered = kernel_spans(kernels), kernel_spans(cover)
    out, j = 0.0, 0
    for start, end in spans:
        length = end - start
        while j < len(covered) and covered[j][1] <= start:
            j += 1
        i = j
        while i < len(covered) and covered[i][0] < end:
            length -= max(0.0, min(end, covered[i][1]) - max(start, covered[i][0]))
            i += 1
        out += length
    return out
