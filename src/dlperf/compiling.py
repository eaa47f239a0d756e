"""A step as torch.compile (Inductor) runs it: fused chains and folded layers.

`fuse(priced, trace)` rewrites the priced ops of a trace (each recorded aten
call with its cost, before timing):

- Contractions (GEMMs, convolutions, fused attention, recurrent layers) stay
  library kernels, as Inductor calls cuBLAS/cuDNN for them by default.
- A maximal run of fusible ops between them (point-wise, reductions,
  normalizations, copies, gathers, pooling: what Inductor lowers to its own
  kernels), in one phase and in trace order, becomes one fused op. Its
  kernels are the run's independent parts: ops that share no tensor (a
  weight's cast beside a normalization) cannot be one kernel; ops linked by
  what one makes and another reads, or by an input both read, are. Its bytes
  are the run's external traffic: every tensor it reads that was made before
  it is read once; a tensor it makes is written only when something after it
  reads it, autograd saved it for backward, nothing inside read it (a result
  of the step: an output, a gradient), or it existed before the run (an
  in-place update). A tensor made and consumed inside costs nothing.
  Backward runs are fused by the same rule (AOTAutograd compiles backward).
- Inference (`trace.training` false) also folds an eval batch norm, and the
  ReLU right after it, into the convolution whose output it alone reads: the
  running statistics become the convolution's weights and bias, as Inductor's
  freezing and TensorRT's layer fusion do (seed 002: "Use BN and
  activations as they are foldable during inference").

Not fused: the loss (outside `torch.compile(model)`: it runs eagerly),
Inductor's fallbacks to eager kernels (sorting, embedding bags, some pooling
and upsampling backwards; `torch/_inductor/lowering.py`, `make_fallback`),
scatters and index_put, ops no handler knows, dlperf's module-level events.

Simplifications, said here once: a linked part of a run is one kernel even
where Inductor splits it (two reductions over different axes, a batch
norm's statistics before its normalization: that second read stays, as the
handler's re-read hint). What the compiled step saves for backward is the
partitioner's (`training_memory.partitioner`: point-wise chains recomputed
inside backward's fused kernels rather than saved).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .jsonable import fields_dict
from .kinds import Category
from .ops.cost import Cost, Costed
from .ops.quantized import fold_quantize
from .tracing import LOSS_MODULE, OpEvent, TensorMeta, Trace

__all__ = ["Fold", "FusedGroup", "FusionSummary", "fold_conv_bn", "fusible", "fuse"]

Priced = list[tuple[OpEvent, Costed]]

# Families that keep their own kernel: a scatter (Inductor emits a separate
# atomic scatter kernel), an op nobody prices, the optimizer step.
UNFUSED_FAMILIES = frozenset({"scatter", "unsupported", "optimizer"})
# Inductor's fallbacks to the eager kernel among the ops dlperf prices
# (torch/_inductor/lowering.py, `make_fallback` and the sort/topk/median
# fallback handlers, torch 2.14), and index_put, lowered to a scatter.
_UNFUSED_NAMES = """
    sort topk kthvalue median nanmedian mode _embedding_bag embedding_bag _embedding_bag_backward
    _adaptive_avg_pool2d_backward adaptive_max_pool2d_backward max_pool3d_with_indices_backward
    upsample_bicubic2d_backward upsample_linear1d_backward upsample_trilinear3d_backward
    index_put index_put_ _index_put_impl_
"""
UNFUSED_PACKETS = frozenset(f"aten.{name}" for name in _UNFUSED_NAMES.split())
# In-place ops that overwrite their first argument without reading it.
_OVERWRITE_FIRST = frozenset(
    {"aten.copy_", "aten.fill_", "aten.zero_", "aten.uniform_", "aten.normal_", "aten.exponential_"}
)
_RELU = frozenset({"aten.relu", "aten.relu_"})


@dataclass(frozen=True)
class FusedGroup:
    """A sequence of ops fused into `kernels` kernels, and how many times it occurs."""

    ops: tuple[str, ...]  # overload packets without "aten.", in trace order
    count: int
    kernels: int = 1

    @property
    def name(self) -> str:
        return "+".join(self.ops)


@dataclass(frozen=True)
class Fold:
    """An eval batch norm (and ReLU) folded into the convolution before it."""

    conv: str  # the convolution's module path
    dropped: tuple[str, ...]  # the folded ops' packets without "aten."


@dataclass
class FusionSummary:
    kernels_before: int
    kernels_after: int
    groups: list[FusedGroup] = field(default_factory=list)  # most frequent first
    folded: list[Fold] = field(default_factory=list)
    ops_fused: int = 0  # ops that became part of a fused kernel
    eager_step_s: float = 0.0  # the same step run eagerly (set by the analysis)

    def to_dict(self) -> dict:
        """The counts first, then the groups and folds: the order the JSON has always had."""
        return fields_dict(self, last=("groups", "folded"))


def fuse(priced: Priced, trace: Trace) -> tuple[Priced, FusionSummary]:
    """The priced ops of `trace` as torch.compile runs them, and what changed.

    `priced` is each recorded event with its cost (the optimizer step may be
    among them); the result keeps unfused ops as they are, in order, and puts
    each fused op where its run began."""
    kernels_before = sum(found.cost.kernels for _, found in priced)
    folded: list[Fold] = []
    if not trace.training:
        priced, folded = fold_conv_bn(fold_quantize(priced))  # int8/fp8: ops/quantized.py
    last_read = _last_reads(priced)
    saved = trace.saved_ids
    out: Priced = []
    sequences: Counter = Counter()
    ops_fused = 0
    for start, end in _runs(priced):
        run = priced[start:end]
        if len(run) == 1:
            out += run
            continue
        out.append(_fused(run, end - 1, last_read, saved, trace))
        sequences[tuple(_short(e.op) for e, _ in run), out[-1][1].cost.kernels] += 1
        ops_fused += len(run)
    summary = FusionSummary(
        kernels_before=kernels_before,
        kernels_after=sum(found.cost.kernels for _, found in out),
        groups=[FusedGroup(ops, n, k) for (ops, k), n in sequences.most_common()],
        folded=folded,
        ops_fused=ops_fused,
    )
    return out, summary


def _short(op: str) -> str:
    """ "add" for "aten.add.Tensor"."""
    if op.startswith("aten.") and op.count(".") >= 2:
        op = op.rsplit(".", 1)[0]
    return op.removeprefix("aten.")


def _ids_known(event: OpEvent) -> bool:
    """Whether the event's storage ids line up with its tensors (events made
    outside the recorder carry none)."""
    return len(event.reads) == len(event.tensors()) and len(event.writes) == len(event.outputs)


def fusible(event: OpEvent, found: Costed) -> bool:
    """Whether Inductor would generate this op's code into a fused kernel."""
    if event.module == LOSS_MODULE or not event.op.startswith(("aten.", "prims.")):
        return False
    if found.cost.gemms or found.category is Category.CONTRACTION:
        return False
    if found.family in UNFUSED_FAMILIES or event.packet in UNFUSED_PACKETS:
        return False
    return _ids_known(event)


def _runs(priced: Priced) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of fusible ops in one phase, and of each
    other op alone, in order."""
    runs = []
    start = 0
    for i in range(1, len(priced) + 1):
        if i < len(priced):
            (prev, prev_found), (event, found) = priced[i - 1], priced[i]
            joined = event.phase == prev.phase and fusible(prev, prev_found)
            if joined and fusible(event, found):
                continue
        runs.append((start, i))
        start = i
    return runs


def _last_reads(priced: Priced) -> dict[int, int]:
    """The position of the last op that reads each storage id."""
    last = {}
    for pos, (event, _) in enumerate(priced):
        for sid in event.reads:
            last[sid] = pos
    return last


def _reads(event: OpEvent) -> list[tuple[int, TensorMeta]]:
    pairs = list(zip(event.reads, event.tensors(), strict=True))
    if event.packet in _OVERWRITE_FIRST and pairs:
        return pairs[1:]  # the destination is written, not read
    if event.packet == "aten.embedding" and pairs and event.outputs:
        # a lookup reads the rows it gathers (the output's size), not the table
        (sid, table), rest = pairs[0], pairs[1:]
        rows = event.outputs[0]
        return [(sid, TensorMeta(rows.shape, table.dtype, rows.stride)), *rest]
    return pairs


def _view_key(sid: int, t: TensorMeta) -> tuple:
    return (sid, t.offset, t.shape, t.stride, t.dtype)


@dataclass
class _Traffic:
    """What a run of ops reads from outside and what it makes, by storage id."""

    external: dict[tuple, TensorMeta] = field(default_factory=dict)  # views read before made
    written: dict[int, dict[tuple, TensorMeta]] = field(default_factory=lambda: defaultdict(dict))
    born: set[int] = field(default_factory=set)  # written before any read: the run's own
    consumed: set[int] = field(default_factory=set)  # read inside after being written
    results: set[int] = field(default_factory=set)  # a backward op's or a first output

    @classmethod
    def of(cls, run: Priced) -> _Traffic:
        found = cls()
        external_ids: set[int] = set()
        for event, _ in run:
            for sid, t in _reads(event):
                if sid in found.written:
                    found.consumed.add(sid)
                else:
                    found.external.setdefault(_view_key(sid, t), t)
                    external_ids.add(sid)
            for i, (sid, t) in enumerate(zip(event.writes, event.outputs, strict=True)):
                if sid not in found.written and sid not in external_ids:
                    found.born.add(sid)
                if i == 0 or event.phase == "backward":
                    found.results.add(sid)
                found.written[sid][_view_key(sid, t)] = t
        return found

    def kept(self, sid: int, end: int, last_read: dict, saved: frozenset) -> bool:
        """Whether the kernel must write storage `sid` (the run ends at `end`)."""
        if sid not in self.born or sid in saved or last_read.get(sid, -1) > end:
            return True
        # never read at all: a result of the step (an output, a gradient),
        # unless it is a forward op's side output nobody uses (a layer norm's
        # statistics in inference), which Inductor drops as dead
        return sid not in self.consumed and sid in self.results


def _fused(run: Priced, end: int, last_read: dict, saved: frozenset, trace: Trace):
    """One kernel for a run of fusible ops ending at position `end`."""
    traffic = _Traffic.of(run)
    outputs = [
        (sid, t)
        for sid, views in traffic.written.items()
        if traffic.kept(sid, end, last_read, saved)
        for t in views.values()
    ]
    inputs = [(key[0], t) for key, t in traffic.external.items()]
    costs = [found for _, found in run]
    cost = Cost(
        flops=sum(c.cost.flops for c in costs),
        bytes_read=sum(t.nbytes for _, t in inputs),
        bytes_written=sum(t.nbytes for _, t in outputs),
        kernels=_independent_parts(run),
        # a batch norm's statistics need the whole tensor before it is normalized:
        # the input is read again unless it fits on chip (the handlers' hint)
        reread_bytes=sum(c.cost.reread_bytes for c in costs),
        working_set_bytes=max(c.cost.working_set_bytes for c in costs),
    )
    members = [e.op for e, _ in run]
    module = _common_module([e.module for e, _ in run])
    event = OpEvent(
        op="fused: " + _label(members),
        args=tuple(t for _, t in inputs),
        kwargs={},
        outputs=tuple(t for _, t in outputs),
        module=module,
        phase=run[0][0].phase,
        module_type=trace.module_types.get(module, ""),
        info={"fused": tuple(members)},
        reads=tuple(sid for sid, _ in inputs),
        writes=tuple(sid for sid, _ in outputs),
    )
    remark = f"{len(run)} ops in {cost.kernels} kernel(s): {'+'.join(map(_short, members))}"
    return event, Costed(cost, _dominant(costs), "fused", (remark,))


def _independent_parts(run: Priced) -> int:
    """How many groups of ops in a run share no tensor: what one op makes and
    another reads, or an input two ops read, links them (union-find)."""
    parent = list(range(len(run)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    toucher: dict[int, int] = {}  # storage id -> an op of the run that read or wrote it
    for i, (event, _) in enumerate(run):
        for sid in (*event.reads, *event.writes):
            if sid in toucher:
                parent[root(i)] = root(toucher[sid])
            else:
                toucher[sid] = i
    return len({root(i) for i in range(len(run))})


_LABEL_OPS = 4  # names shown in a fused kernel's op label; the remark lists all


def _label(members: list[str]) -> str:
    names = [_short(op) for op in members]
    if len(names) <= _LABEL_OPS:
        return "+".join(names)
    return "+".join(names[:_LABEL_OPS]) + f"+... ({len(names)} ops)"


def _dominant(costs: list[Costed]) -> Category:
    """The category that moved most bytes among the fused ops, run eagerly."""
    moved: Counter = Counter()
    for c in costs:
        moved[c.category or Category.ELEMENTWISE] += c.cost.bytes
    return max(moved, key=moved.get)


def _common_module(paths: list[str]) -> str:
    """The innermost module path that contains every one of `paths`."""
    parts = [p.split(".") if p else [] for p in paths]
    common = []
    for names in zip(*parts, strict=False):  # as far as the shortest path
        if any(n != names[0] for n in names):
            break
        common.append(names[0])
    return ".".join(common)


def fold_conv_bn(priced: Priced) -> tuple[Priced, list[Fold]]:
    """Inference: each eval batch norm that alone reads a convolution's output,
    and a ReLU that then takes the batch norm's output, folded into the
    convolution (dropped)."""
    readers: dict[int, list[int]] = defaultdict(list)
    for pos, (event, _) in enumerate(priced):
        for sid in dict.fromkeys(event.reads):
            readers[sid].append(pos)
    writer: dict[int, int] = {}
    dropped: set[int] = set()
    folds: list[Fold] = []
    for pos, (event, _) in enumerate(priced):
        conv = _conv_before(priced, pos, writer, readers) if pos not in dropped else None
        if conv is not None:
            gone = [pos, *_relu_after(priced, pos, readers)]
            dropped.update(gone)
            ops = tuple(_short(priced[g][0].op) for g in gone)
            folds.append(Fold(priced[conv][0].module, ops))
        for sid in event.writes:
            writer[sid] = pos
    return [p for pos, p in enumerate(priced) if pos not in dropped], folds


def _eval_batch_norm(event: OpEvent, found: Costed) -> bool:
    if found.family != "batch_norm" or event.phase != "forward" or "backward" in event.op:
        return False
    if "no_training" in event.op or "no_update" in event.op:
        return True
    flag = event.args[5] if len(event.args) > 5 else None
    return flag is False


def _conv_before(priced: Priced, pos: int, writer: dict, readers: dict) -> int | None:
    """The position of the convolution an eval batch norm at `pos` can fold into."""
    event, found = priced[pos]
    if not _eval_batch_norm(event, found) or not event.reads:
        return None
    source = writer.get(event.reads[0])
    if source is None or priced[source][1].family != "conv":
        return None
    # the convolution's raw output must have no other use once the BN is folded in
    return source if readers[event.reads[0]] == [pos] else None


def _relu_after(priced: Priced, pos: int, readers: dict) -> list[int]:
    """The ReLU that takes the batch norm's output at `pos` next, if it can fold."""
    if not priced[pos][0].writes:
        return []
    out = priced[pos][0].writes[0]
    later = [r for r in readers[out] if r > pos]
    if not later:
        return []
    relu = priced[later[0]][0]
    if relu.packet not in _RELU or not relu.reads or relu.reads[0] != out:
        return []
    # an in-place ReLU leaves its result where later readers look; otherwise it
    # must be the BN output's only reader
    in_place = relu.packet.endswith("_")
    return [later[0]] if in_place or later == [later[0]] else []
