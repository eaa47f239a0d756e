"""Which of a traced step's tensors and work Megatron-style tensor
parallelism splits, found from the data flow of the forward events (their
storage ids), with no knowledge of the architecture:

- a linear layer's GEMM that reads a replicated activation is
  column-parallel: its output (attention heads, MLP hidden units, the
  vocabulary's logits) is split over the tp GPUs;
- one that reads a split activation is row-parallel: its output is a
  partial sum, all-reduced, and replicated again;
- any other op that reads a split tensor runs on its shard: its outputs are
  split, and so is a tensor it reads that was made from nothing (a dropout
  mask drawn for the split attention probabilities); ops on replicated
  tensors only (layer norms, dropout and residual adds after a row-parallel
  layer, embeddings) run whole on every GPU.

Sequence parallelism (Korthikanti et al. 2022) splits those replicated
regions along the sequence instead. For a GPT layer this gives the paper's
accounting: of 34 s b h bytes of saved activations, 24 lie in split regions
and 10 (the two layer norms' inputs, the two linear inputs after them, the
two dropout masks) are replicated; the attention scores (5 a s^2 b) are
split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..ops import CostContext, costed, fallback
from ..ops.linear import activation_operand
from ..tracing import OpEvent, Trace

_FORWARD = "forward"


def split_storages(
    trace: Trace, weight: Callable[[OpEvent], float] | None = None
) -> tuple[frozenset[int], dict[str, float]]:
    """The storages tensor parallelism splits, and per module the share of its
    forward work that runs split (linear layers, and ops on split tensors),
    each op counted by `weight` (its time: `roofline_weight`; None: one each,
    where autocast's casts beside a GEMM would count as much as the GEMM)."""
    split: set[int] = set()
    # storages filled from nothing but themselves (a dropout mask drawn in place
    # into a new tensor): they take the side of the split data they meet
    fresh: set[int] = set()
    seen: set[int] = set()
    ops: dict[str, list[float]] = {}  # module -> [split work, work]
    forward = [e for e in trace.events if e.phase == _FORWARD]
    sharded_weights = _weight_casts(forward)
    for e in forward:
        operand = activation_operand(e)
        reads_split = any(s in split for s in e.reads)
        if set(e.reads) <= set(e.writes) and not seen.intersection(e.writes):
            fresh.update(e.writes)
        elif reads_split:
            split.update(s for s in e.reads if s in fresh)
        seen.update(e.reads, e.writes)
        if operand is not None:
            row_parallel = e.reads[operand] in split
            if row_parallel:
                split.difference_update(e.writes)
            else:
                split.update(e.writes)
            runs_split = True
        elif reads_split:
            split.update(e.writes)
            runs_split = True
        else:
            split.difference_update(e.writes)
            runs_split = id(e) in sharded_weights
        work = weight(e) if weight else 1.0
        counts = ops.setdefault(e.module, [0.0, 0.0])
        counts[0] += work if runs_split else 0.0
        counts[1] += work
    shares = {module: n / total if total else 0.0 for module, (n, total) in ops.items()}
    return frozenset(split), shares


def _weight_casts(forward: list[OpEvent]) -> set[int]:
    """The ops (by id) that make a linear layer's weight operand from its
    parameter, autocast's casts: under tensor parallelism each GPU holds, and
    casts, only its shard of the weight."""
    maker = {sid: e for e in forward for sid in e.writes}
    out = set()
    for e in forward:
        operand = activation_operand(e)
        if operand is None:
            continue
        for i, sid in enumerate(e.reads):
            made = maker.get(sid)
            if i != operand and made is not None and made.packet == "aten._to_copy":
                out.add(id(made))
    return out


def roofline_weight(spec, precision) -> Callable[[OpEvent], float]:
    """An op's time on `spec` by the roofline: its math at the precision's peak
    or its bytes at the memory bandwidth, whichever is longer."""
    ctx = CostContext(precision)
    dtype = precision.math if spec.has_dtype(precision.math) else "fp32"
    peak, bandwidth = spec.peak_flops_per_s(dtype), spec.memory_bandwidth_bytes_per_s

    def seconds(event: OpEvent) -> float:
        cost = (costed(event, ctx) or fallback(event)).cost
        return max(cost.flops / peak, (cost.bytes_read + cost.bytes_written) / bandwidth)

    return seconds


def has_linear_layers(trace: Trace, modules: Iterable[str]) -> bool:
    """Whether any forward linear GEMM runs inside these modules (what tp splits)."""
    wanted = tuple(modules)
    return any(
        e.phase == _FORWARD
        and activation_operand(e) is not None
        and any(e.module == m or e.module.startswith(m + ".") for m in wanted)
        for e in trace.events
    )


def split_share(shares: dict[str, float], module: str) -> float:
    """The split share of `module`, else of its nearest ancestor with forward ops
    (a backward op attributed to a module that ran none itself); 0 if none."""
    path = module
    while path not in shares and "." in path:
        path = path.rpartition(".")[0]
    return shares.get(path, 0.0)
