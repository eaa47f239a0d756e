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

from collections.abc import Iterable

from ..ops.linear import activation_operand
from ..tracing import Trace

_FORWARD = "forward"


def split_storages(trace: Trace) -> tuple[frozenset[int], dict[str, float]]:
    """The storages tensor parallelism splits, and per module the share of its
    forward ops that run split (linear layers, and ops on split tensors)."""
    split: set[int] = set()
    # storages filled from nothing but themselves (a dropout mask drawn in place
    # into a new tensor): they take the side of the split data they meet
    fresh: set[int] = set()
    seen: set[int] = set()
    ops: dict[str, list[int]] = {}  # module -> [split ops, ops]
    for e in trace.events:
        if e.phase != _FORWARD:
            continue
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
            runs_split = False
        counts = ops.setdefault(e.module, [0, 0])
        counts[0] += runs_split
        counts[1] += 1
    shares = {module: n / total for module, (n, total) in ops.items()}
    return frozenset(split), shares


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
