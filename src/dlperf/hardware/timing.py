"""A small, disciplined timing harness.

Warm up first, then take repeated samples and keep them all: the median is
the figure, the spread (interquartile range) says how far to trust it. On a
CUDA device, synchronize around each sample so the device's work is timed,
not the launch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import DlperfError


@dataclass(frozen=True)
class Measurement:
    samples_s: list[float] = field(repr=False)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def spread_s(self) -> float:
        """Interquartile range of the samples (0 with fewer than 4)."""
        if len(self.samples_s) < 4:
            return 0.0
        q = statistics.quantiles(self.samples_s, n=4)
        return q[2] - q[0]


def time_callable(
    fn: Callable[[], object],
    warmup: int = 2,
    repeats: int = 7,
    min_sample_s: float = 0.0,
    synchronize: Callable[[], object] | None = None,
    budget_s: float | None = None,
) -> Measurement:
    """Time `fn()`; each sample runs it enough times to last `min_sample_s`.

    With `budget_s`, sampling stops once that much time has passed (one sample
    at least), so a slow call cannot hold a probe for minutes.
    """
    if not callable(fn):
        raise DlperfError(f"cannot time {fn!r}: it is not callable")
    if repeats < 1:
        raise DlperfError("repeats must be at least 1")
    sync = synchronize or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    inner = 1
    if min_sample_s > 0:
        start = time.perf_counter()
        fn()
        sync()
        once = max(time.perf_counter() - start, 1e-9)
        inner = max(1, int(min_sample_s / once))
    samples = []
    began = time.perf_counter()
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / inner)
        if budget_s is not None and time.perf_counter() - began >= budget_s:
            break
    return Measurement(samples)
