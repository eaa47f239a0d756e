"""Which of a profiler trace's calls are the model's ops, and what each took.

A traced model's ops are the calls dlperf's dispatch mode saw: below
autograd, above the kernels' own nested calls. In a profiler trace they sit
among wrappers (`aten::linear` holds `aten::t` and `aten::addmm`) and nested
calls (`aten::_to_copy` holds `aten::copy_`). A trace call is a model op when
its name is one the model predicts and no enclosing call is one: the
outermost such call, its *anchor*, owns the time of everything inside it.

On a GPU that time is the kernels launched inside the anchor; on a CPU, where
the op is its own kernel, the anchor's span. Calls are matched to predicted
rows by name and input shapes in order (the i-th call of a shape in each
profiled step is the i-th predicted row of that shape), then by name alone,
for traces recorded without shapes and for tensor-list arguments.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .kineto import Kernel, TraceData

# Trace names that are the same op as a name dlperf's trace records: the
# library's own kernels behind a generic op (cuDNN's batch norm is
# `native_batch_norm` on the CPU and under fake tensors).
ALIASES = {
    "aten::cudnn_batch_norm": "aten::native_batch_norm",
    "aten::miopen_batch_norm": "aten::native_batch_norm",
    "aten::_native_batch_norm_legit": "aten::native_batch_norm",
    "aten::_native_batch_norm_legit_no_training": "aten::native_batch_norm",
    "aten::cudnn_batch_norm_backward": "aten::native_batch_norm_backward",
    "aten::miopen_batch_norm_backward": "aten::native_batch_norm_backward",
    "aten::cudnn_convolution": "aten::convolution",
    "aten::_convolution": "aten::convolution",
    "aten::clamp_min_": "aten::relu_",
    "aten::clamp_min": "aten::relu",
}
# One optimizer row stands for every call of the step's optimizer phase: the
# update, GradScaler's unscale and gradient clipping (their multi-tensor calls).
OPTIMIZER = "(optimizer)"
# torch.optim's fused optimizers' own op (fused=True), the optimizer's name in group 1
FUSED_OPTIMIZER_CALL = re.compile(r"^aten::_fused_(adamw?|sgd|adagrad)_?$")
_MULTI_TENSOR_CALLS = re.compile(r"^aten::(_foreach_\w+|_amp_foreach_\w+|_amp_update_scale_)$")
# The optimizer phase's rows besides the update itself (`optimizer.py`)
_STEP_ROWS = ("amp.grad_scaler", "clip_grad_norm", "zero_grad")


def optimizer_head(rows: list) -> int | None:
    """The row that holds the optimizer phase's calls: the update's
    (`optimizer.*`), else the phase's first; None without an optimizer phase."""
    phase = [i for i, r in enumerate(rows) if trace_name(r.op) == OPTIMIZER]
    update = [i for i in phase if rows[i].op.startswith("optimizer.")]
    return (update or phase or [None])[0]


def trace_name(row_op: str) -> str:
    """The profiler's name of a predicted row's op: aten.addmm.default -> aten::addmm."""
    if row_op.startswith("optimizer.") or row_op in _STEP_ROWS:
        return OPTIMIZER
    parts = row_op.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "dlperf", "prims"):
        return f"{parts[0]}::{parts[1]}"
    return row_op


# SDPA as dlperf traces it (one op each way, `tracing.attention`) and as the
# profiler names the calls: the public op forward, each backend's op backward.
_ATTENTION_CALLS = (
    (re.compile(r"^aten::scaled_dot_product_attention$"), "dlperf::attention"),
    (
        re.compile(
            r"^aten::_(scaled_dot_product_\w+|flash_attention|efficient_attention)_backward$"
        ),
        "dlperf::attention_backward",
    ),
)


def canonical(name: str) -> str:
    if FUSED_OPTIMIZER_CALL.match(name) or _MULTI_TENSOR_CALLS.match(name):
        return OPTIMIZER
    for pattern, own in _ATTENTION_CALLS:
        if pattern.match(name):
            return own
    return ALIASES.get(name, name)


@dataclass
class Call:
    """One anchored call in the trace: a model op as the run made it."""

    name: str  # canonical
    shapes: tuple | None  # input shapes, None when the trace recorded none
    start_us: float
    time_us: float
    kernels: list[Kernel] = field(default_factory=list)
    step: int | None = None  # the profiled step it ran in (None: outside them, or no marks)


def shape_key(dims) -> tuple | None:
    """Tensor input shapes as a hashable key (scalars and empty entries dropped)."""
    if not isinstance(dims, list):
        return None

    def frozen(x):
        return tuple(frozen(v) for v in x) if isinstance(x, list) else x

    return tuple(frozen(d) for d in dims if isinstance(d, list) and d)


def row_key(shapes) -> tuple:
    return tuple(tuple(s) for s in shapes if s)


def _anchor(data: TraceData, names: set[str], forced: set[int]) -> tuple[list, dict]:
    """(anchors, anchor of each op): the outermost call of each tree whose
    name the model predicts, or that is `forced` (the op's id)."""
    anchor_of: dict[int, dict | None] = {}
    anchors = []
    for ops in data.threads:
        stack: list[tuple[float, dict | None]] = []  # (end, anchor) of enclosing calls
        for op in ops:  # sorted by start, longest first
            while stack and stack[-1][0] <= op["ts"]:  # ended: one that starts then is a sibling
                stack.pop()
            outer = stack[-1][1] if stack else None
            mine = id(op) in forced or canonical(op["name"]) in names
            anchor = outer or (op if mine else None)
            if anchor is op:
                anchors.append(op)
            anchor_of[id(op)] = anchor
            stack.append((op["ts"] + op["dur"], anchor))
    return anchors, anchor_of


_NODE = "autograd::engine::evaluate_function"


def _math_attention_backward(data: TraceData, anchors: list, anchor_of: dict) -> dict:
    """Autograd's backward of each SDPA call that ran the math path (a CPU in
    training with dropout): no backward op of its own, but one autograd node
    per op of its forward, linked to them by sequence number. {id(node):
    the group it joins (the forward call's id)}."""
    forward = {id(op): op for op in anchors if canonical(op["name"]) == "dlperf::attention"}
    if not forward:
        return {}
    # The profiler gives each op the number the next autograd node will take,
    # whether or not the op makes one: the node's maker is the last op, in
    # start order on its thread, that records its number (a no-op cast at the
    # end of SDPA records the number of the op after it).
    owner, threads = {}, defaultdict(set)
    for tid, ops in enumerate(data.threads):
        node_end = float("-inf")
        for op in ops:  # in start order
            if op["name"].startswith(_NODE):
                node_end = max(node_end, op["ts"] + op["dur"])
            if op["ts"] < node_end:  # a node, or inside one: backward's, not a maker
                continue
            seq = op["args"].get("Sequence number")
            if isinstance(seq, int):
                owner[seq] = anchor_of.get(id(op))
                threads[seq].add(tid)
    seqs = {
        seq: anchor
        for seq, anchor in owner.items()
        # numbers count per thread: one seen on two threads is ambiguous
        if anchor is not None and id(anchor) in forward and len(threads[seq]) == 1
    }
    found = {}
    for op in data.cpu_ops:
        if not op["name"].startswith(_NODE):
            continue
        seq = op["args"].get("Sequence number")
        maker = seqs.get(seq) if isinstance(seq, int) else None
        if maker is not None and op["ts"] >= maker["ts"] + maker["dur"]:  # after its forward
            found[id(op)] = id(maker)
    return found


def anchored_calls(data: TraceData, names: set[str]) -> tuple[list[Call], list[Kernel]]:
    """The trace's model-op calls in start order, and the kernels no call owns.

    `names` are the canonical trace names the model predicts. An SDPA call
    that ran the math path gets its backward from autograd's nodes
    (`_math_attention_backward`), where the model predicts one.
    """
    anchors, anchor_of = _anchor(data, names, set())
    backward = "dlperf::attention_backward"
    groups = {}
    if backward in names and not any(canonical(op["name"]) == backward for op in anchors):
        groups = _math_attention_backward(data, anchors, anchor_of)
        if groups:
            anchors, anchor_of = _anchor(data, names, set(groups))
    gpu = bool(data.kernels)
    starts = [start for start, _ in data.step_spans]
    calls, backward_of = {}, {}
    for op in anchors:
        group = groups.get(id(op))
        if group is not None and group in backward_of:  # one more node of a backward begun
            calls[id(op)] = backward_of[group]
            backward_of[group].time_us += 0.0 if gpu else op["dur"]
            continue
        dims = op["args"].get("Input Dims")
        name = backward if group is not None else canonical(op["name"])
        call = Call(
            name, None if group is not None else shape_key(dims), op["ts"],
            0.0 if gpu else op["dur"], step=_step_of(op["ts"], starts, data.step_spans),
        )  # fmt: skip
        calls[id(op)] = call
        if group is not None:
            backward_of[group] = call
    orphans = []
    for k in data.kernels:
        anchor = anchor_of.get(id(k.op)) if k.op is not None else None
        if anchor is None:
            orphans.append(k)
            continue
        call = calls[id(anchor)]
        call.time_us += k.duration_us
        call.kernels.append(k)
    # on a GPU a call that launched nothing (a view, a host-side op) is no kernel's op
    unique = {id(c): c for c in calls.values()}.values()
    found = sorted((c for c in unique if c.kernels or not gpu), key=lambda c: c.start_us)
    return found, orphans


def in_steps(data: TraceData):
    """A test of whether a kernel ran for a profiled step: its launch (else its
    start) inside a ProfilerStep span. All kernels do in a trace without marks."""
    if not data.step_spans:
        return lambda k: True
    starts = [start for start, _ in data.step_spans]

    def inside(k: Kernel) -> bool:
        t = k.launch_us if k.launch_us is not None else k.start_us
        return _step_of(t, starts, data.step_spans) is not None

    return inside


def _step_of(ts: float, starts: list[float], spans: list[tuple[float, float]]) -> int | None:
    i = bisect.bisect_right(starts, ts) - 1
    if i >= 0 and ts <= spans[i][0] + spans[i][1]:
        return i
    return None


def match(rows: list, calls: list[Call], steps: int) -> tuple[list, list[Call]]:
    """Per predicted row, the trace calls that are it in each step (empty when
    none), and the calls no row took.

    Rows are matched per (name, shapes) key in order. In a trace with step
    marks, within each step: the i-th row of a key takes that step's i-th
    call of it, and a call outside every step is no row's. Without marks,
    with c calls of a key and r rows, row i takes calls i, i + r, i + 2r, ...
    for as many whole steps as the calls make. The optimizer phase's row
    (`optimizer_head`) takes every optimizer call. Rows left, and calls left,
    are then matched by name alone in the same way.
    """
    taken: list[list[Call]] = [[] for _ in rows]
    marked = any(c.step is not None for c in calls)
    calls_in = [c for c in calls if c.step is not None] if marked else calls
    used: set[int] = set()
    head = optimizer_head(rows)
    if head is not None:
        taken[head] = [c for c in calls_in if c.name == OPTIMIZER]
        used.update(id(c) for c in taken[head])
    for keyed in (True, False):
        row_groups, call_groups = defaultdict(list), defaultdict(list)
        for i, r in enumerate(rows):
            if not taken[i] and trace_name(r.op) != OPTIMIZER:
                name = trace_name(r.op)
                row_groups[(name, row_key(r.shapes)) if keyed else name].append(i)
        for c in calls_in:
            if id(c) in used or c.name == OPTIMIZER or (keyed and c.shapes is None):
                continue
            call_groups[(c.name, c.shapes) if keyed else c.name].append(c)
        for key, indices in row_groups.items():
            found = call_groups.get(key, [])
            picks = (
                _per_step(found, len(indices), steps)
                if marked
                else _strided(found, len(indices), steps)
            )
            for i, mine in zip(indices, picks, strict=True):
                if mine:
                    taken[i] = mine
                    used.update(id(c) for c in mine)
    return taken, [c for c in calls if id(c) not in used]


def _per_step(found: list[Call], rows: int, steps: int) -> list[list[Call]]:
    """Row j of a key: the j-th call of the key in each step that has one."""
    by_step = defaultdict(list)
    for c in found:
        by_step[c.step].append(c)
    return [[by_step[s][j] for s in range(steps) if len(by_step[s]) > j] for j in range(rows)]


def _strided(found: list[Call], rows: int, steps: int) -> list[list[Call]]:
    """Row j of a key: calls j, j + r, j + 2r, ... for the whole steps there are."""
    whole = min(len(found) // rows, steps)
    return [[found[j + s * rows] for s in range(whole)] for j in range(rows)]


def repeats(rows: list, calls: list[Call]) -> int:
    """How many times a trace without step marks ran the model: the most
    common ratio of an op's calls to its predicted rows (1 at least)."""
    predicted = Counter(trace_name(r.op) for r in rows if trace_name(r.op) != OPTIMIZER)
    seen = Counter(c.name for c in calls)
    ratios = Counter(seen[n] // k for n, k in predicted.items() if seen[n] >= k > 0)
    return max(1, ratios.most_common(1)[0][0]) if ratios else 1
