"""What one engine step costs, tabulated once per deployment and interpolated,
so a simulation of 10^4-10^5 steps never traces again.

An engine step (vLLM's, TensorRT-LLM's in-flight batching) runs `d`
sequences decoding one token each over caches of c tokens on average, and
prefill chunks of q_j new tokens beside k_j tokens already cached. dlperf
prices it from its own traced steps (`StepTracer`), split where the work
depends on different sizes:

- a decode-only step: the traced decode at batch d (the grid's powers of two
  around it, linear between them), at two cache lengths, linear between them
  (attention reads K and V in proportion to the cache; nothing else depends
  on it, so the longer cache's step is the shorter one's trace with its
  attention kernels priced again: one trace per batch);
- prefill tokens beside it run through every layer but attention with the
  decodes' tokens, as one larger GEMM: they add rest(d + p) - rest(d), where
  rest(n) is a traced n-token prefill without its attention (linear between
  the grid's token counts);
- each chunk's attention: the traced prefill's attention calls (one a layer,
  on one GPU) priced again as the engine's kernel runs the chunk: q queries
  over the k + q keys of the cache, causal from the last key
  (`chunk_shape`), through the same kernel model (`kernels.pricing.time`:
  its launch, its waves of query blocks, its FLOPs and its reads of K and V).
  A chunk's cost is not a tiny prefill's per-pair cost scaled up: one token
  after 511 cached is a decode-like pass over 512 keys.

Each traced step is priced as `serve` prices it (fused kernels, tensor and
pipeline parallelism, precision, CUDA graphs, the host's launches).
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
from collections import Counter

from ..costs import AttentionShape, Cost
from ..dtypes import bytes_per_element
from ..kernels.pricing import GemmTimer, time
from .cache import check_positions
from .steps import Step
from .timeline import Timeline, micro_batches, step_time_s


def _powers(limit: int) -> list[int]:
    """1, 2, 4, ... up to and including `limit`."""
    out = [1]
    while out[-1] < limit:
        out.append(min(limit, out[-1] * 2))
    return out


def _attention_s(step: Step) -> float:
    return float(sum(r.time_s for r in step.rows if r.family == "attention"))


def _attention_calls(step: Step) -> list[tuple[AttentionShape, int]]:
    """The step's fused attention calls: each distinct shape and how often it runs."""
    found = Counter(
        shape for r in step.rows if r.family == "attention"
        for shape in getattr(r, "attention_shapes", ())
    )  # fmt: skip
    return list(found.items())


# FlashAttention's forward writes each query's log-sum-exp per head, in fp32.
LSE_BYTES = 4


def chunk_shape(shape: AttentionShape, queries: int, cached: int, kv_dtype: str) -> AttentionShape:
    """`shape` (a traced prefill's attention) as a chunk of `queries` new tokens
    after `cached` ones runs it: q = queries over kv = cached + queries keys,
    causal from the last key, no mask tensor. It moves each query's q, output
    and log-sum-exp, and each key's k and v at the cache's dtype."""
    keys = cached + queries
    width = shape.head_dim + shape.value_dim
    per_query = shape.heads * (width * bytes_per_element(shape.dtype) + LSE_BYTES)
    per_key = shape.kv_heads * width * bytes_per_element(kv_dtype)
    moved = shape.batch * (queries * per_query + keys * per_key)
    return dataclasses.replace(
        shape, q_len=queries, kv_len=keys, causal=True, mask="", bytes=float(moved)
    )


class StepCosts:
    """Step times of one deployment (module docstring), traced on first use."""

    def __init__(self, timeline: Timeline, max_seqs: int, max_tokens: int, max_cached: int):
        """Decode steps up to `max_seqs` sequences and `max_cached` cached
        tokens; prefill traced up to `max_tokens` in one sequence (beyond, the
        last segment's slope carries on)."""
        self.timeline = timeline
        self.batches = _powers(max_seqs)
        self.tokens = _powers(max_tokens)
        # two cache lengths to interpolate between (at least one token apart)
        self.short, self.long = 1, max(2, max_cached)
        self._decode: dict[tuple[int, int], float] = {}
        self._prefill: dict[int, tuple[float, float]] = {}
        self._calls: list[tuple[AttentionShape, int]] | None = None
        self._chunks: dict[tuple[int, int], float] = {}  # (queries, cached) -> seconds
        self._decode_steps: dict[int, Step] = {}
        self._timer = GemmTimer(timeline.tracer.engine.spec)
        self.traced = 0  # steps traced so far

    # -- the tabulated points -------------------------------------------------

    def _decode_at(self, batch: int, cached: int) -> float:
        key = (batch, cached)
        if key not in self._decode:
            if cached != self.short:
                # Only attention reads the cache: the short cache's traced step
                # with its attention kernels priced again at `cached`, through
                # the same issue timeline (no second trace).
                check_positions(self.timeline.tracer.run.model, cached + 1)
                self._decode_at(batch, self.short)
                self._decode[key] = self._decode_grown(batch, cached)
            else:
                ((step, timing),), _ = self.timeline.decode(batch, [cached])
                self._decode[key] = timing["time_s"]
                self._decode_steps[batch] = step
                self.traced += 1
        return self._decode[key]

    def _decode_grown(self, batch: int, cached: int) -> float:
        step = self._decode_steps[batch]
        rows = []
        for row in step.rows:
            shapes = getattr(row, "attention_shapes", ())
            if row.family == "attention" and shapes:
                row = copy.copy(row)
                for shape in shapes:
                    grown = self._attention_at(shape, 1, cached)
                    row.time_s += grown - self._attention_at(shape, 1, self.short)
            rows.append(row)
        grown_step = dataclasses.replace(step, rows=rows, cached=cached)
        line = self.timeline
        micro = micro_batches(batch, 1, line.pp)
        engine = line.tracer.engine
        return step_time_s(grown_step, engine, line.pp, micro, line.cuda_graphs)["time_s"]

    def _attention_at(self, shape: AttentionShape, queries: int, cached: int) -> float:
        """`shape` priced as `queries` new tokens after `cached` (`chunk_shape`)."""
        engine = self.timeline.tracer.engine
        chunk = chunk_shape(shape, queries, cached, engine.kv_dtype)
        cost = Cost(flops=chunk.flops, bytes_read=chunk.bytes, attention=(chunk,))
        return time(cost, engine.spec, chunk.dtype, self._timer).seconds

    def _prefill_at(self, tokens: int) -> tuple[float, float]:
        """(the step without attention, its attention's time)."""
        if tokens not in self._prefill:
            step, timing = self.timeline.prefill_tokens(tokens)
            attention = _attention_s(step)
            self._prefill[tokens] = (timing["time_s"] - attention, attention)
            if self._calls is None:
                self._calls = _attention_calls(step)
            self.traced += 1
        return self._prefill[tokens]

    # -- interpolation -----------------------------------------------------------

    @staticmethod
    def _between(grid: list[int], x: float, value) -> float:
        """`value` at x, linear between the grid points around it (the end
        segment's slope beyond the grid)."""
        if len(grid) == 1:
            return value(grid[0]) * x / grid[0]
        i = min(max(1, bisect.bisect_left(grid, x)), len(grid) - 1)
        lo, hi = grid[i - 1], grid[i]
        a, b = value(lo), value(hi)
        return a + (b - a) * (x - lo) / (hi - lo)

    def decode_s(self, batch: int, mean_cached: float) -> float:
        """A decode-only step of `batch` sequences with `mean_cached` tokens each."""

        def at(b: int) -> float:
            short, long = self._decode_at(b, self.short), self._decode_at(b, self.long)
            return short + (long - short) * (mean_cached - self.short) / (self.long - self.short)

        return self._between(self.batches, batch, at)

    def rest_s(self, tokens: float) -> float:
        """Every layer but attention over `tokens` tokens of one step."""
        if tokens <= 0:
            return 0.0
        return self._between(self.tokens, tokens, lambda n: self._prefill_at(n)[0])

    def chunk_attention_s(self, queries: int, cached: int) -> float:
        """Causal attention of a prefill chunk of `queries` tokens after `cached`:
        the traced prefill's attention calls priced at the chunk's shape."""
        key = (queries, cached)
        if key not in self._chunks:  # a workload's lengths repeat: price each once
            if self._calls is None:
                self._prefill_at(self.tokens[0])
            self._chunks[key] = sum(
                count * self._attention_at(shape, queries, cached) for shape, count in self._calls
            )
        return self._chunks[key]

    def step_s(self, decodes: int, decode_cached: float, chunks: list[tuple[int, int]]) -> float:
        """A step of `decodes` decoding sequences (`decode_cached` tokens each on
        average) and prefill `chunks` of (new tokens, tokens already cached)."""
        prefill = sum(q for q, _ in chunks)
        attention = sum(self.chunk_attention_s(q, k) for q, k in chunks)
        if decodes == 0:
            return self.rest_s(prefill) + attention
        step = self.decode_s(decodes, decode_cached)
        if prefill:
            step += self.rest_s(decodes + prefill) - self.rest_s(decodes) + attention
        return step
