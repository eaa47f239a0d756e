"""A simulated run's latencies, gathered as its requests finish, in memory
that does not grow with the run.

`Samples` holds one metric's values (the gaps between tokens, or each
request's TTFT): exactly up to `Samples.EXACT` of them (2^23 gaps; 2^20
requests' latencies, `REQUESTS_EXACT`), then as counts over
log-spaced bins 0.5% wide (percentiles to within a bin, the mean exact).
`Latencies` is what `benchmark_serving` reports of a run: per request its
TTFT, TPOT (over requests of more than one token) and E2E latency, the
tokens it read and wrote, and how many met an SLO; for a staged load each
stage's as well.
"""

from __future__ import annotations

import math

import numpy as np

REQUESTS_EXACT = 2**20


class Samples:
    """One metric's values over a run (module docstring)."""

    EXACT = 2**23  # 64 MiB of float64
    BINS_PER_DECADE = 460  # 10 ** (1 / 460) = 1.005
    LOW, DECADES = 1e-9, 14  # 1 ns .. 10^5 s

    def __init__(self, exact: int | None = None):
        self.exact = exact or self.EXACT  # values held exactly before they fold into bins
        # held exactly: whole blocks, and the latest arrays as they came (a list
        # append is the simulation's hot path), joined into a block every PARTS
        self.blocks: list[np.ndarray] | None = []
        self.parts: list[np.ndarray] = []
        self.held = 0
        self.counts: np.ndarray | None = None
        self.count, self.total = 0, 0.0
        self.low, self.high = math.inf, -math.inf

    PARTS = 4096

    def add(self, values: np.ndarray) -> None:
        n = len(values)
        if not n:
            return
        self.count += n
        if self.blocks is not None:
            self.parts.append(values)
            self.held += n
            if self.held <= self.exact:
                if len(self.parts) >= self.PARTS:
                    self.blocks.append(np.concatenate(self.parts))
                    self.parts = []
                return
            values = np.concatenate(self.blocks + self.parts)
            self.blocks, self.parts = None, []
            self.counts = np.zeros(self.BINS_PER_DECADE * self.DECADES + 1, np.int64)
        self.total += float(values.sum())
        self.low = min(self.low, float(values.min()))
        self.high = max(self.high, float(values.max()))
        self.counts += np.bincount(self._bins(values), minlength=len(self.counts))

    def _bins(self, values: np.ndarray) -> np.ndarray:
        scaled = np.log10(np.maximum(values, self.LOW) / self.LOW) * self.BINS_PER_DECADE
        return np.minimum(scaled.astype(np.int64), self.BINS_PER_DECADE * self.DECADES)

    def values(self) -> np.ndarray | None:
        """Every value, while they are held exactly (None once binned)."""
        if self.blocks is None:
            return None
        held = self.blocks + self.parts
        return np.concatenate(held) if held else np.empty(0)

    def stats(self, percentiles) -> dict:
        """mean, median and the percentiles (None for a run without values)."""
        if not self.count:
            return {"mean": None, "median": None, **{f"p{q}": None for q in percentiles}}
        exact = self.values()
        if exact is not None:
            out = {"mean": float(np.mean(exact)), "median": float(np.median(exact))}
            out.update({f"p{q}": float(np.percentile(exact, q)) for q in percentiles})
            return out
        cumulative = np.cumsum(self.counts)

        def at(q: float) -> float:
            i = int(np.searchsorted(cumulative, q / 100 * self.count))
            middle = self.LOW * 10 ** ((i + 0.5) / self.BINS_PER_DECADE)
            return float(min(max(middle, self.low), self.high))

        out = {"mean": self.total / self.count, "median": at(50)}
        out.update({f"p{q}": at(q) for q in percentiles})
        return out


class Latencies:
    """The finished requests' latencies and counters (module docstring);
    `slo` (anything with `met(ttft, tpot, e2e)`) counts those that meet it,
    `stages` keeps each stage's figures apart."""

    def __init__(self, slo=None, stages: int = 0):
        self.slo = slo
        # a run's requests: exact percentiles up to 2^20 of them (8 MiB each)
        exact = min(Samples.EXACT, REQUESTS_EXACT)
        self.ttft, self.tpot, self.e2e = Samples(exact), Samples(exact), Samples(exact)
        self.count = self.met = self.input_tokens = self.output_tokens = 0
        self.first_arrival_s, self.last_finish_s = math.inf, -math.inf
        self.stages = [Latencies() for _ in range(stages)]

    def add(self, arrival_s, first_token_s, finish_s, input_len, output_len,
            stage=None) -> None:  # fmt: skip
        """Finished requests: each one's arrival, first token, finish and
        lengths (and stage, for a staged load)."""
        if stage is not None and self.stages:
            for i in np.unique(stage):
                chosen = stage == i
                self.stages[i].add(arrival_s[chosen], first_token_s[chosen], finish_s[chosen],
                                   input_len[chosen], output_len[chosen])  # fmt: skip
        ttft, e2e = first_token_s - arrival_s, finish_s - arrival_s
        many = output_len > 1
        tpot = np.zeros(len(ttft))
        tpot[many] = (e2e[many] - ttft[many]) / (output_len[many] - 1)
        self.ttft.add(ttft)
        self.tpot.add(tpot[many])
        self.e2e.add(e2e)
        self.count += len(ttft)
        self.input_tokens += int(input_len.sum())
        self.output_tokens += int(output_len.sum())
        self.first_arrival_s = min(self.first_arrival_s, float(arrival_s.min()))
        self.last_finish_s = max(self.last_finish_s, float(np.max(finish_s)))
        if self.slo is not None:
            self.met += int(self.slo.met(ttft, tpot, e2e).sum())
