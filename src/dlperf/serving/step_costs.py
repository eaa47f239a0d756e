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
  on it);
- prefill tokens beside it run through every layer but attention with the
  decodes' tokens, as one larger GEMM: they add rest(d + p) - rest(d), where
  rest(n) is a traced n-token prefill without its attention (linear between
  the grid's token counts);
- each chunk's attention: causal attention of q queries over k + q keys does
  q (k + (q + 1) / 2) query-key pairs; it is priced at the traced prefill
  attention's time per pair at the nearest grid size.

Each traced step is priced as `serve` prices it (fused kernels, tensor and
pipeline parallelism, precision, CUDA graphs, the host's launches).
"""

from __future__ import annotations

import bisect

from .steps import Step
from .timeline import Timeline


def _powers(limit: int) -> list[int]:
    """1, 2, 4, ... up to and including `limit`."""
    out = [1]
    while out[-1] < limit:
        out.append(min(limit, out[-1] * 2))
    return out


def _attention_s(step: Step) -> float:
    return float(sum(r.time_s for r in step.rows if r.family == "attention"))


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
        self.traced = 0  # steps traced so far

    # -- the tabulated points -------------------------------------------------

    def _decode_at(self, batch: int, cached: int) -> float:
        key = (batch, cached)
        if key not in self._decode:
            ((_, timing),), _ = self.timeline.decode(batch, [cached])
            self._decode[key] = timing["time_s"]
            self.traced += 1
        return self._decode[key]

    def _prefill_at(self, tokens: int) -> tuple[float, float]:
        """(the step without attention, attention's time per query-key pair)."""
        if tokens not in self._prefill:
            step, timing = self.timeline.prefill_tokens(tokens)
            attention = _attention_s(step)
            pairs = tokens * (tokens + 1) / 2
            self._prefill[tokens] = (timing["time_s"] - attention, attention / pairs)
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
        """Causal attention of a prefill chunk of `queries` tokens after `cached`."""
        nearest = self.tokens[min(bisect.bisect_left(self.tokens, queries), len(self.tokens) - 1)]
        pairs = queries * (cached + (queries + 1) / 2)
        return self._prefill_at(nearest)[1] * pairs

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
