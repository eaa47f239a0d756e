"""PyTorch's CUDA caching allocator, replayed on a step's allocations.

`torch.cuda.max_memory_allocated` counts live tensors; what the GPU gives up
(`max_memory_reserved`, and with the CUDA context `nvidia-smi`) is the
segments the caching allocator took from the driver and never returns. The
two differ by the allocator's rules, which are PyTorch's documented constants
(c10/cuda/CUDACachingAllocator.cpp, "memory management" notes):

- every request is rounded up to 512 B;
- requests of at most 1 MiB come from a pool of 2 MiB segments; larger ones
  from a second pool, in 20 MiB segments when under 10 MiB, else in a segment
  of their own rounded up to 2 MiB;
- a request takes the smallest cached free block of its pool that holds it
  (best fit, then lowest address), split when the rest is worth keeping (at
  least 512 B in the small pool, more than 1 MiB in the large one), else
  handed out whole;
- a freed block merges with free neighbours of its segment, never across
  segments; segments stay reserved until the driver refuses a new one, when
  the whole free segments are given back and the request retried.

So a long-lived tensor allocated into a hole that activations left (the
optimizer's states in the first step) moves the next step's activations into
new segments, and a 12 MiB tensor reserves 12 MiB where eleven 1.1 MiB ones
reserve 20. `replay` runs a sequence of allocations and frees through these
rules and returns the peaks of both counts. Expandable segments and a
`max_split_size_mb` setting are not modelled (neither is the default).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

MIN_BLOCK = 512  # every request is a multiple of this
SMALL_SIZE = 1 << 20  # largest request served from the small pool
SMALL_BUFFER = 2 << 20  # a small-pool segment
LARGE_BUFFER = 20 << 20  # a large-pool segment for requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20  # larger requests get their own segment, rounded to this


def round_size(nbytes: int) -> int:
    """A request's size as the allocator serves it."""
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    """The segment the allocator reserves when no cached block holds `size`."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class _Block:
    __slots__ = ("segment", "offset", "size", "free", "prev", "next")

    def __init__(self, segment: int, offset: int, size: int):
        self.segment, self.offset, self.size = segment, offset, size
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None

    @property
    def key(self) -> tuple[int, int, int]:  # the pool's order: size, then address
        return (self.size, self.segment, self.offset)


@dataclass(frozen=True)
class AllocatorPeaks:
    """The largest live (requested) and reserved bytes over a replay."""

    allocated_bytes: int  # the tensors' own sizes, as autograd holds them
    reserved_bytes: int  # segments taken from the driver
    segments: int  # segments reserved at the end
    released: int  # times the cache was emptied to make room

    @property
    def overhead_bytes(self) -> int:
        """What the allocator reserves beyond the live tensors at their peak."""
        return self.reserved_bytes - self.allocated_bytes


class CachingAllocator:
    """The allocator's state: segments, their blocks, and the two free pools."""

    def __init__(self, capacity_bytes: int | None = None):
        self.capacity = capacity_bytes
        self.pools: dict[bool, list[tuple[tuple[int, int, int], _Block]]] = {True: [], False: []}
        self.segments: dict[int, tuple[int, bool]] = {}  # segment id -> (size, small pool)
        self.live: dict[object, tuple[_Block, int]] = {}  # key -> (block, requested bytes)
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.released = 0
        self._next_segment = 0

    def malloc(self, key, nbytes: int) -> None:
        """Allocate `nbytes` for `key` (a key still live is freed first)."""
        if key in self.live:
            self.free(key)
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        block = self._best_fit(small, size) or self._new_segment(segment_size(size), small)
        rest = block.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            tail = _Block(block.segment, block.offset + size, rest)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._insert(small, tail)
        block.free = False
        self.live[key] = (block, nbytes)
        self.allocated += nbytes
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key) -> None:
        """Return `key`'s block to its pool, merged with free neighbours."""
        found = self.live.pop(key, None)
        if found is None:
            return
        block, nbytes = found
        self.allocated -= nbytes
        small = self.segments[block.segment][1]
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove(small, neighbour)
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        block.free = True
        self._insert(small, block)

    def peaks(self) -> AllocatorPeaks:
        return AllocatorPeaks(
            self.peak_allocated, self.peak_reserved, len(self.segments), self.released
        )

    def _best_fit(self, small: bool, size: int) -> _Block | None:
        pool = self.pools[small]
        at = bisect.bisect_left(pool, ((size, -1, -1),))
        if at == len(pool):
            return None
        _, block = pool.pop(at)
        return block

    def _new_segment(self, size: int, small: bool) -> _Block:
        if self.capacity is not None and self.reserved + size > self.capacity:
            self._release_cached()
        segment = self._next_segment
        self._next_segment += 1
        self.segments[segment] = (size, small)
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return _Block(segment, 0, size)

    def _release_cached(self) -> None:
        """Give the driver back every segment that is one free block (as the
        allocator does before it reports out of memory)."""
        self.released += 1
        for small in (True, False):
            kept = []
            for key, block in self.pools[small]:
                if block.prev is None and block.next is None:
                    self.reserved -= self.segments.pop(block.segment)[0]
                else:
                    kept.append((key, block))
            self.pools[small] = kept

    def _insert(self, small: bool, block: _Block) -> None:
        bisect.insort(self.pools[small], (block.key, block))

    def _remove(self, small: bool, block: _Block) -> None:
        pool = self.pools[small]
        del pool[bisect.bisect_left(pool, (block.key,))]
