"""Continuous batching over a paged KV cache, step by step, as vLLM's
scheduler (V1) runs it.

Each step the scheduler fills a budget of `max_num_batched_tokens` tokens
and `max_num_seqs` sequences:

1. the running requests first, in the order they were admitted: one token
   each when decoding, the rest of the prompt (as much as the budget holds)
   when still prefilling;
2. then waiting requests, first come first served, while the budget, the
   sequence limit and the free KV blocks allow; with chunked prefill a prompt
   may be cut to what the budget leaves, without it a prompt runs whole or
   waits (and a step that admits prompts runs only them: prefill first);
3. a request whose next tokens need a KV block when none is free preempts
   the latest admitted running request (its blocks freed, its tokens
   recomputed later: preemption by recompute), or waits itself.

Which requests run a step is a policy (`POLICIES`, one function each,
registered with `@policy`): vLLM V1's chunked prefill (steps 1-2 above) and
V0's prefill-first scheduler without chunking. A new policy is one function
of the engine's state (`EngineState`: its `running` and `waiting` requests,
`continue_running(budget)`, `admit(budget, whole)`) returning the step's
(request, new tokens), chosen by its name (`EngineLimits.policy`,
`RunConfig.serving.scheduler`).

A request holds ceil(tokens in cache / block_size) blocks. With prefix
caching, a share of each prompt (whole blocks) is found in the cache at
admission and not computed again: a set share of every prompt
(`prefix_cache_hit_rate`), or a shared-prefix dataset's system prompt once
a request of its group has computed it. A step ends `StepCosts.step_s` later;
every request whose scheduled tokens reach its last known token emits one
token then (the first at the end of its prefill). Requests that arrive
during a step join at the next.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import DlperfError
from .step_costs import StepCosts
from .workload import Workload


@dataclass(frozen=True)
class EngineLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int  # KV cache blocks per GPU
    block_size: int = 16
    chunked_prefill: bool = True
    prefix_cache_hit_rate: float = 0.0
    policy: str | None = None  # a name in POLICIES; None: as chunked_prefill says

    @property
    def scheduling(self) -> Policy:
        """The policy that picks each step's requests."""
        return scheduling_policy(self.policy, self.chunked_prefill)


class TokenGaps:
    """The gaps between consecutive tokens of a run, in memory that does not grow
    with it: kept exactly up to `EXACT` gaps (every run of 10^4 requests), then
    folded into counts over log-spaced bins 0.5% wide (percentiles to within
    one, the mean exact)."""

    EXACT = 2**23  # 64 MiB of float64
    BINS_PER_DECADE = 460  # 10 ** (1 / 460) = 1.005
    LOW_S, DECADES = 1e-9, 14  # 1 ns .. 10^5 s

    def __init__(self):
        self.exact: list[np.ndarray] | None = []
        self.held = 0
        self.counts: np.ndarray | None = None
        self.count, self.total = 0, 0.0
        self.low, self.high = math.inf, -math.inf

    def add(self, gaps: np.ndarray) -> None:
        if not len(gaps):
            return
        self.count += len(gaps)
        if self.exact is not None:  # a list append: the simulation's hot path
            self.exact.append(gaps)
            self.held += len(gaps)
            if self.held <= self.EXACT:
                return
            gaps, self.exact = np.concatenate(self.exact), None
            self.counts = np.zeros(self.BINS_PER_DECADE * self.DECADES + 1, np.int64)
        self.total += float(gaps.sum())
        self.low, self.high = min(self.low, float(gaps.min())), max(self.high, float(gaps.max()))
        self.counts += np.bincount(self._bins(gaps), minlength=len(self.counts))

    def _bins(self, gaps: np.ndarray) -> np.ndarray:
        scaled = np.log10(np.maximum(gaps, self.LOW_S) / self.LOW_S) * self.BINS_PER_DECADE
        return np.minimum(scaled.astype(np.int64), self.BINS_PER_DECADE * self.DECADES)

    def values(self) -> np.ndarray | None:
        """Every gap, while they are held exactly (None once binned)."""
        if self.exact is None:
            return None
        return np.concatenate(self.exact) if self.exact else np.empty(0)

    def stats(self, percentiles) -> dict:
        """mean, median and the percentiles (None for a run without gaps)."""
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
            middle = self.LOW_S * 10 ** ((i + 0.5) / self.BINS_PER_DECADE)
            return float(min(max(middle, self.low), self.high))

        out = {"mean": self.total / self.count, "median": at(50)}
        out.update({f"p{q}": at(q) for q in percentiles})
        return out


@dataclass
class Timings:
    """Per request: when its first token came and when it finished; the gaps
    between consecutive tokens (`TokenGaps`); and the run's counters."""

    first_token_s: np.ndarray
    finish_s: np.ndarray
    itl: TokenGaps = field(default_factory=TokenGaps)
    steps: int = 0
    preemptions: int = 0
    busy_s: float = 0.0
    batch_total: int = 0  # sequences over all steps (their mean: batch_total / steps)


@dataclass(frozen=True)
class Policy:
    """A scheduler policy: the next step's (request, new tokens) from the
    engine's state; `whole_prompts` when a prompt must run in one step."""

    name: str
    schedule: Callable[[EngineState], list[tuple[int, int]]]
    whole_prompts: bool = False


POLICIES: dict[str, Policy] = {}


def scheduling_policy(name: str | None, chunked_prefill: bool = True) -> Policy:
    """The policy `name` (None: vLLM's, with or without chunked prefill),
    refused in one line when no policy has that name."""
    if name is None:
        return POLICIES["chunked-prefill" if chunked_prefill else "prefill-first"]
    if name not in POLICIES:
        raise DlperfError(f"unknown scheduler policy {name!r}; choose from: {', '.join(POLICIES)}")
    return POLICIES[name]


def policy(name: str, whole_prompts: bool = False):
    """Register a scheduler policy under `name` (module docstring)."""

    def register(schedule):
        if name in POLICIES:
            raise ValueError(f"scheduler policy {name!r} is registered twice")
        POLICIES[name] = Policy(name, schedule, whole_prompts)
        return schedule

    return register


@policy("chunked-prefill")
def chunked_prefill(engine: EngineState) -> list[tuple[int, int]]:
    """vLLM V1: the running requests first (a decode token, or as much of the
    prompt as the budget holds), then waiting ones in what the budget leaves."""
    scheduled, budget = engine.continue_running(engine.limits.max_num_batched_tokens)
    return scheduled + engine.admit(budget, whole=False)


@policy("prefill-first", whole_prompts=True)
def prefill_first(engine: EngineState) -> list[tuple[int, int]]:
    """vLLM V0 without chunking: waiting prompts run whole, in steps of their
    own; the running requests decode when no prompt is admitted."""
    budget = engine.limits.max_num_batched_tokens
    admitted = engine.admit(budget, whole=True) if engine.waiting else []
    return admitted or engine.continue_running(budget)[0]


def run_engine(work: Workload, limits: EngineLimits, costs: StepCosts) -> Timings:
    """Serve `work` to the end on the engine (module docstring)."""
    _check_fits(work.input_len + work.output_len, limits)
    return EngineState(work, limits, costs).run()


class EngineState:
    """The scheduler's state: per request its tokens in the cache, its output
    tokens so far and its KV blocks; the waiting queue and the running list."""

    def __init__(self, work: Workload, limits: EngineLimits, costs: StepCosts):
        n = len(work)
        self.work, self.limits, self.costs = work, limits, costs
        self.prompt = work.input_len.astype(np.int64)
        self.output = work.output_len.astype(np.int64)
        self.computed = np.zeros(n, np.int64)
        self.generated = np.zeros(n, np.int64)
        self.held = np.zeros(n, np.int64)
        self.admitted_once = np.zeros(n, bool)
        self.last_token = np.zeros(n)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.free = limits.kv_blocks
        self.schedule = limits.scheduling.schedule  # the policy, looked up once
        self.group, self.prefix = work.group, work.prefix_len
        self.prefixes_cached: set[int] = set()  # groups whose shared prompt is computed
        self.now, self.done = 0.0, 0
        self.timings = Timings(np.full(n, np.nan), np.full(n, np.nan))

    def blocks_for(self, tokens) -> int:
        return -(-tokens // self.limits.block_size)

    def run(self) -> Timings:
        work, n, arrived = self.work, len(self.work), 0
        while self.done < n:
            while arrived < n and work.arrival_s[arrived] <= self.now:
                self.waiting.append(arrived)
                arrived += 1
            if not self.running and not self.waiting:
                self.now = float(work.arrival_s[arrived])
                continue
            following = float(work.arrival_s[arrived]) if arrived < n else math.inf
            if not self.waiting and self._decoding_only() and self._fast_forward(following):
                continue
            scheduled = self.schedule(self)
            if not scheduled:
                raise DlperfError("dlperf's simulated engine stalled: nothing could be scheduled")
            self._step(scheduled)
        return self.timings

    # -- scheduling -------------------------------------------------------------

    def continue_running(self, budget: int) -> tuple[list[tuple[int, int]], int]:
        """The running requests' next tokens within `budget`, in admission order
        (preempting the latest admitted where KV blocks run out), and the budget left."""
        scheduled = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            new = min(int(self.prompt[r] + self.generated[r] - self.computed[r]), budget)
            need = self.blocks_for(int(self.computed[r]) + new) - self.held[r]
            while need > self.free and self.running[-1] != r:
                self._preempt(self.running.pop())
            if need > self.free:  # nothing newer to preempt: it waits itself
                self._preempt(self.running.pop())
                continue
            self._allocate(r, need)
            scheduled.append((r, new))
            budget -= new
            i += 1
        return scheduled, budget

    def _allocate(self, r: int, blocks: int) -> None:
        self.free -= blocks
        self.held[r] += blocks

    def _preempt(self, r: int) -> None:
        """Free a running request's blocks; it recomputes its tokens when readmitted."""
        self.free += int(self.held[r])
        self.held[r], self.computed[r] = 0, 0
        self.waiting.appendleft(r)
        self.timings.preemptions += 1

    def admit(self, budget: int, whole: bool) -> list[tuple[int, int]]:
        """Waiting requests admitted, first come first served, while the budget,
        the sequence limit and the free blocks allow; with `whole` a prompt
        runs whole or waits."""
        limits, out = self.limits, []
        while self.waiting and budget > 0 and len(self.running) < limits.max_num_seqs:
            r = self.waiting[0]
            if not self.admitted_once[r]:
                self.computed[r] = self._cached_at_admission(r)
            remaining = int(self.prompt[r] + self.generated[r] - self.computed[r])
            if whole and remaining > budget:
                break
            new = min(remaining, budget)
            need = self.blocks_for(int(self.computed[r]) + new) - self.held[r]
            if need > self.free:
                break
            self.waiting.popleft()
            self.admitted_once[r] = True
            self._allocate(r, need)
            self.running.append(r)
            out.append((r, new))
            budget -= new
        return out

    def _cached_at_admission(self, r: int) -> int:
        """Prompt tokens of `r` the prefix cache holds when it is first admitted:
        whole blocks, one token at least left to compute (module docstring)."""
        limits = self.limits
        hit = int(self.prompt[r] * limits.prefix_cache_hit_rate)
        if self.prefix is not None and int(self.group[r]) in self.prefixes_cached:
            hit = max(hit, int(self.prefix[r]))
        return min(hit // limits.block_size * limits.block_size, int(self.prompt[r]) - 1)

    # -- a step ----------------------------------------------------------------

    def _step(self, scheduled: list[tuple[int, int]]) -> None:
        decodes, cached, chunks = 0, 0, []
        for r, new in scheduled:
            if new == 1 and self.computed[r] >= self.prompt[r]:
                decodes += 1
                cached += int(self.computed[r])
            else:
                chunks.append((new, int(self.computed[r])))
        seconds = self.costs.step_s(decodes, cached / decodes if decodes else 0.0, chunks)
        self._advance(seconds, len(scheduled))
        emitted = []
        for r, new in scheduled:
            self.computed[r] += new
            if self.computed[r] == self.prompt[r] + self.generated[r]:
                emitted.append(r)
            if self.prefix is not None and self.computed[r] >= self.prefix[r]:
                self.prefixes_cached.add(int(self.group[r]))
        if emitted:
            self._emit(np.array(emitted, np.int64))

    def _advance(self, seconds: float, batch: int, steps: int = 1) -> None:
        self.now += seconds
        self.timings.steps += steps
        self.timings.busy_s += seconds
        self.timings.batch_total += batch * steps

    def _emit(self, ids: np.ndarray) -> None:
        """Each of `ids` emits one token now; the ones at their last finish."""
        started = self.generated[ids] > 0
        self.timings.itl.add(self.now - self.last_token[ids[started]])
        self.timings.first_token_s[ids[~started]] = self.now
        self.last_token[ids] = self.now
        self.generated[ids] += 1
        self._finish(ids[self.generated[ids] >= self.output[ids]])

    def _finish(self, ended: np.ndarray) -> None:
        if not len(ended):
            return
        self.timings.finish_s[ended] = self.now
        self.done += len(ended)
        gone = set(ended.tolist())
        self.running = [r for r in self.running if r not in gone]
        self.free += int(self.held[ended].sum())
        self.held[ended] = 0

    # -- many decode steps at once ---------------------------------------------------

    def _decoding_only(self) -> bool:
        """Every running request has emitted a token and computed all before it."""
        ids = self.running
        known = self.prompt[ids] + self.generated[ids]
        return bool(np.all(self.generated[ids] >= 1) and np.all(self.computed[ids] == known - 1))

    def _fast_forward(self, next_arrival: float) -> bool:
        """Run, in one go, the decode steps of an unchanged batch that come
        before the next arrival and up to the first request's last token, when
        the free blocks cover them all (steps priced one by one, as `_step`
        would: the mean cache grows one token a step). False when fewer than
        two such steps are ahead."""
        ids = np.array(self.running, np.int64)
        steps = int((self.output[ids] - self.generated[ids]).min())
        if steps < 2:
            return False
        grown = self.blocks_for(self.computed[ids] + steps) - self.held[ids]
        if int(grown.sum()) > self.free:
            return False
        mean = float(self.computed[ids].mean())
        first = self.costs.decode_s(len(ids), mean)
        slope = self.costs.decode_s(len(ids), mean + 1) - first  # linear in the cache
        times = first + slope * np.arange(steps)
        starts = self.now + np.concatenate(([0.0], np.cumsum(times)[:-1]))
        steps = int(np.searchsorted(starts, next_arrival, side="left"))  # steps begun before it
        if steps < 2:
            return False
        times = times[:steps]
        held = self.blocks_for(self.computed[ids] + steps)
        self.free -= int((held - self.held[ids]).sum())
        self.held[ids] = held
        self.timings.itl.add(self.now + times[0] - self.last_token[ids])
        self.timings.itl.add(np.repeat(times[1:], len(ids)))
        self._advance(float(times.sum()), len(ids), steps)
        self.computed[ids] += steps
        self.generated[ids] += steps
        self.last_token[ids] = self.now
        self._finish(ids[self.generated[ids] >= self.output[ids]])
        return True


def _check_fits(tokens: np.ndarray, limits: EngineLimits) -> None:
    longest = int(tokens.max())
    blocks = math.ceil(longest / limits.block_size)
    if blocks > limits.kv_blocks:
        raise DlperfError(
            f"a request of {longest} tokens needs {blocks} KV cache blocks, more than the "
            f"{limits.kv_blocks} the GPUs hold; shorten the dataset's lengths, add --tp or "
            "give a larger --gpu-memory-utilization"
        )
    if limits.scheduling.whole_prompts and longest > limits.max_num_batched_tokens:
        # a prompt runs whole, and after a preemption its output is recomputed with it
        raise DlperfError(
            f"without chunked prefill a request of {longest} tokens must fit one step: give "
            f"--max-num-batched-tokens {longest} or more, or drop --no-chunked-prefill"
        )
