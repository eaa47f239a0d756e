"""A training step's allocations in the order PyTorch makes them, replayed
through the caching allocator (`allocator.py`) to find what it reserves.

The timeline is the trace's own (under checkpointing, `with_recompute`'s): a
storage is allocated when an event creates it (writes it without reading
it), and freed after its last use before it is created again or never used
again, which is when eager PyTorch drops the last reference (a checkpointed
region's tensors die after forward and come back in backward). Before the
first step the weights are allocated one parameter at a time; each micro-batch
brings its inputs; a backward output nothing reads is a parameter's gradient,
held to the optimizer step (then dropped, as `zero_grad(set_to_none=True)`
does) and added in place by later micro-batches. The optimizer's states are
allocated, one tensor per parameter and state, in the first step, after
backward has freed the activations: they take the holes the activations
left, which is why the second step reserves more than the first. Two steps
are replayed, the second being the steady state `nvidia-smi` shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..checkpointing import with_recompute
from ..kinds import Phase
from ..optimizer import get_optimizer, state_bytes
from ..tracing import Trace
from ..tracing.events import storage_sizes
from .allocator import AllocatorPeaks, CachingAllocator

STEPS = 2  # the first step allocates the optimizer's states; the second is steady
MICRO_BATCHES = 2  # the first allocates the gradients; later ones add into them
_BACKWARD = Phase.BACKWARD.value


@dataclass(frozen=True)
class _Access:
    event: int
    creates: bool  # writes the storage without reading it


def _accesses(events) -> dict[int, list[_Access]]:
    found: dict[int, list[_Access]] = {}
    for i, e in enumerate(events):
        reads = set(e.reads)
        for sid in reads:
            found.setdefault(sid, []).append(_Access(i, False))
        for sid in e.writes:
            if sid not in reads:
                found.setdefault(sid, []).append(_Access(i, True))
    return found


def _timeline(events, inputs: dict[int, int], saved: dict[int, int]):
    """Per event: the storages to allocate before it, the storages to free
    after it, and the gradients it makes (created in backward, never read).
    A storage first met in an in-place op was made by a factory call the trace
    does not record (`empty_like` before `bernoulli_`): that op allocates it.
    `saved` sizes win over the written tensors' (a dropout mask is saved as
    the GPU keeps it, one byte an element)."""
    accesses = _accesses(events)
    sizes = storage_sizes(events) | saved
    allocs: list[list[tuple[int, int]]] = [[] for _ in events]
    frees: list[list[int]] = [[] for _ in events]
    grads: list[list[tuple[int, int]]] = [[] for _ in events]
    for sid, seq in accesses.items():
        if sid not in sizes and sid not in inputs:
            continue  # a weight or buffer: allocated once, before the step
        live = sid in inputs  # the micro-batch's inputs are there before it starts
        for n, access in enumerate(seq):
            after = seq[n + 1] if n + 1 < len(seq) else None
            if (access.creates or n == 0) and not live:
                if after is None and events[access.event].phase == _BACKWARD:
                    grads[access.event].append((sid, sizes[sid]))
                    continue
                allocs[access.event].append((sid, sizes[sid]))
                live = True
            if live and (after is None or after.creates):
                frees[access.event].append(sid)
                live = False
    return allocs, frees, grads


def step_peaks(
    trace: Trace,
    optimizer: str,
    checkpoint: str = "none",
    accumulate: int = 1,
    capacity_bytes: int | None = None,
    with_states: bool = True,
) -> AllocatorPeaks:
    """The allocator's peaks over two optimizer steps of `trace` (one
    micro-batch) under `checkpoint`, with `accumulate` micro-batches a step.
    Without `with_states`, the activations' own churn only: no weights, no
    optimizer states, and each gradient dropped once made (a plan shards
    them all; FSDP reduce-scatters a block's gradients as backward leaves it)."""
    events = with_recompute(trace, checkpoint) if trace.training else list(trace.events)
    written = {sid for e in events for sid in e.writes}
    saved = {t.storage: t.nbytes for t in trace.saved if t.kind == "activation"}
    inputs = {sid: nbytes for sid, nbytes in saved.items() if sid not in written}
    allocs, frees, grads = _timeline(events, inputs, saved)
    pool = CachingAllocator(capacity_bytes)
    word = trace.precision.master_weight_bytes
    for n, shape in enumerate(trace.param_shapes if with_states else ()):
        pool.malloc(("weight", n), word * math.prod(shape))
    for step in range(STEPS if trace.training else 1):
        for micro in range(min(accumulate, MICRO_BATCHES)):
            tag = (step, micro)
            for sid, nbytes in inputs.items():
                pool.malloc((tag, sid), nbytes)
            for i in range(len(events)):
                for sid, nbytes in allocs[i]:
                    pool.malloc((tag, sid), nbytes)
                for sid, nbytes in grads[i]:
                    if with_states and micro == 0:
                        pool.malloc(("grad", sid), nbytes)
                    else:  # added into the gradient, then dropped
                        pool.malloc((tag, sid), nbytes)
                        pool.free((tag, sid))
                for sid in frees[i]:
                    pool.free((tag, sid))
            for key in [k for k in pool.live if isinstance(k, tuple) and k[0] == tag]:
                pool.free(key)
        if not trace.training:
            break
        if step == 0 and with_states:
            _optimizer_states(pool, trace, optimizer, word)
        for key in [k for k in pool.live if k[0] == "grad"]:
            pool.free(key)
    return pool.peaks()


def _optimizer_states(pool: CachingAllocator, trace: Trace, optimizer: str, word: int) -> None:
    """The optimizer's states, one tensor per parameter and state (a factored
    state, Adafactor's, as one tensor of its rows and columns)."""
    opt = get_optimizer(optimizer)
    for n, shape in enumerate(trace.trained_shapes):
        numel = math.prod(shape)
        if opt.factored:
            pool.malloc(("state", n), state_bytes(optimizer, numel, [shape], word))
            continue
        itemsize = opt.state_itemsize or word
        for k in range(opt.states):
            pool.malloc(("state", n, k), itemsize * numel)
