"""What a compiled step saves for backward (`--compile`).

torch.compile's AOTAutograd splits the joint forward-backward graph with a
min-cut partitioner: a tensor that point-wise ops make (activations, casts,
scaling, a residual add) need not be saved when backward can recompute it,
inside its own fused kernels, from tensors it has anyway. GEMMs, attention,
normalizations, reductions and random ops (dropout's mask) are not
recomputed. So where eager autograd keeps, say, GPT-2's tanh-GELU's fp32
intermediates (the power, the tanh, one plus the tanh) beside the linear
layer's output, the compiled step keeps that output alone.

`partitioned(trace)` is the trace with that saved set: each saved
activation a recomputable op made is replaced by the tensors its
recomputation starts from (walking back through recomputable ops to the
first tensors that are not), when those add fewer new bytes than it holds,
a greedy form of the min cut. The recompute's own time is not added: it
runs inside backward's fused kernels, which read the kept tensors where
eager backward read the saved ones.
"""

from __future__ import annotations

import dataclasses

from ..kinds import Phase
from ..ops.registry import labels_of
from ..tracing import OpEvent, SavedTensor, Trace
from ..tracing.events import storage_sizes

# What the partitioner recomputes: point-wise ops and casts (Inductor's
# fusible, cheap ops), not dropout's random draws.
RECOMPUTED_FAMILIES = frozenset({"elementwise"})
RECOMPUTED_PACKETS = frozenset({"aten._to_copy"})
_FORWARD = Phase.FORWARD.value


def recomputable(e: OpEvent) -> bool:
    if e.phase != _FORWARD:
        return False
    if e.packet in RECOMPUTED_PACKETS:
        return True
    labels = labels_of(e)
    return labels is not None and labels[1] in RECOMPUTED_FAMILIES


def partitioned(trace: Trace) -> Trace:
    """`trace` with the saved set a compiled step keeps (module docstring)."""
    events = trace.events
    creator: dict[int, int] = {}
    for i, e in enumerate(events):
        if e.phase == _FORWARD:
            for sid in e.writes:
                creator.setdefault(sid, i)
    sizes = storage_sizes(events)
    eager = {s.storage: s for s in trace.saved}
    kept: dict[int, SavedTensor] = {}
    for s in trace.saved:
        i = creator.get(s.storage)
        if s.kind != "activation" or i is None or not recomputable(events[i]):
            kept.setdefault(s.storage, s)
            continue
        sources = _sources(s.storage, events, creator, eager)
        new = [sid for sid in sources if sid not in kept and sid not in eager]
        if sum(sizes.get(sid, 0) for sid in new) >= s.nbytes:
            kept.setdefault(s.storage, s)  # recomputing would keep more than it frees
            continue
        for sid in sources:
            if sid in eager:
                kept.setdefault(sid, eager[sid])
            else:
                module = events[creator[sid]].module
                kept.setdefault(sid, SavedTensor(module, sizes.get(sid, 0), "activation", sid))
    return dataclasses.replace(trace, saved=list(kept.values()))


def _sources(sid: int, events, creator: dict[int, int], eager: dict) -> list[int]:
    """The storages a recomputation of `sid` starts from: walking back through
    recomputable ops, the first that are not (parameters and inputs that
    autograd did not save are at hand anyway and are not listed)."""
    found: list[int] = []
    seen = {sid}
    stack = [sid]
    while stack:
        at = stack.pop()
        i = creator.get(at)
        if i is not None and recomputable(events[i]):
            for read in events[i].reads:
                if read not in seen:
                    seen.add(read)
                    stack.append(read)
        elif at != sid and (i is not None or at in eager):
            found.append(at)
    return found
