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

Requests come from a stream (`workload.Stream`), drawn as they arrive and
held in slots only while in the engine (`EngineState`): a run's memory is
bounded by the engine's queue window and running batch, not its length.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import DlperfError
from .latencies import Latencies, Samples
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
    # vLLM's async scheduling (its default since v0.12): the next step is scheduled
    # while this one runs, so a request that arrives during a step joins the one after next
    async_scheduling: bool = False

    @property
    def scheduling(self) -> Policy:
        """The policy that picks each step's requests."""
        return scheduling_policy(self.policy, self.chunked_prefill)


@dataclass
class Timings:
    """A run's counters, the gaps between consecutive tokens (`Samples`), the
    finished requests' latencies where asked (`Latencies`) and, for a run of
    a `Workload` held whole, each request's first token and finish times."""

    first_token_s: np.ndarray | None = None
    finish_s: np.ndarray | None = None
    latencies: Latencies | None = None
    itl: Samples = field(default_factory=Samples)
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


def run_engine(work, limits: EngineLimits, costs: StepCosts,
               latencies: Latencies | None = None) -> Timings:  # fmt: skip
    """Serve `work` to the end on the engine (module docstring): a `Workload`
    held whole (each request's first token and finish kept in the `Timings`)
    or a stream of them (`workload.Stream`, drawn as the run reaches its
    requests); the finished requests' latencies gathered in `latencies`."""
    whole = isinstance(work, Workload)
    longest = int((work.input_len + work.output_len).max()) if whole else work.longest
    _check_fits(longest, limits)
    timings = Timings(latencies=latencies)
    if whole:
        timings.first_token_s, timings.finish_s = (np.full(len(work), np.nan) for _ in "ab")
    EngineState([work] if whole else work, limits, costs, timings).run()
    return timings


# Finished requests recorded into the run's latencies at once (numpy calls per batch).
FINISHED_BATCH = 512


class _Arrivals:
    """The requests not yet waiting in the engine, in arrival order: the
    stream's current chunk and the next request of it."""

    def __init__(self, chunks):
        self.source, self.chunk, self.at, self.number = iter(chunks), None, 0, 0
        self.next = math.inf  # when the next request arrives (inf: none is left)
        self._next_chunk()

    def _next_chunk(self) -> None:
        self.chunk, self.at = next(self.source, None), 0
        if self.chunk is not None and not len(self.chunk):
            self._next_chunk()
        # Python floats: a bisect and an index on them beat numpy's on scalars
        self.times = [] if self.chunk is None else self.chunk.arrival_s.tolist()
        self._next_time()

    def _next_time(self) -> None:
        self.next = math.inf if self.chunk is None else self.times[self.at]

    def take(self, now: float, most: int) -> tuple[Workload, slice] | None:
        """Up to `most` requests of the chunk that have arrived by `now`: the
        chunk and their slice of it (None: none has)."""
        if self.next > now or most <= 0:  # a float compare: the simulation's hot path
            return None
        c = self.chunk
        end = min(bisect.bisect_right(self.times, now, self.at), self.at + most)
        taken = slice(self.at, end)
        self.number += end - self.at
        self.at = end
        if end == len(c):
            self._next_chunk()
        else:
            self._next_time()
        return c, taken


class EngineState:
    """The scheduler's state: the waiting queue and the running list of the
    requests in the engine, and per request (in a slot, reused once it
    finishes) its lengths, tokens in the cache, output tokens so far and KV
    blocks. Requests join the waiting queue as they arrive, at most `window`
    of them at a time (the rest wait in the stream, not drawn yet): no step
    admits more than max_num_seqs, so first come first served runs as with
    every one queued, in memory bounded by the engine, not the run."""

    _INTS = ("number", "prompt", "output", "computed", "generated", "held", "admitted", "group",
             "prefix", "stage")  # fmt: skip
    _FLOATS = ("arrival", "first_token", "last_token")

    def __init__(self, chunks, limits: EngineLimits, costs: StepCosts, timings: Timings):
        self.limits, self.costs, self.timings = limits, costs, timings
        self.arrivals = _Arrivals(chunks)
        self.window = max(1024, 4 * limits.max_num_seqs)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.free = limits.kv_blocks
        self.schedule = limits.scheduling.schedule  # the policy, looked up once
        self.spare: list[int] = []  # slots free for the next arrivals
        for name in self._INTS + self._FLOATS:
            setattr(self, name, np.zeros(0, np.int64 if name in self._INTS else float))
        self.finished: list[tuple] = []  # finished requests' figures, not yet recorded
        self.shares_prefixes = False  # a shared-prefix dataset's requests
        self.prefixes_cached: set[int] = set()  # groups whose shared prompt is computed
        self.now = 0.0
        self.last_start = 0.0  # when the step just run began

    def blocks_for(self, tokens) -> int:
        return -(-tokens // self.limits.block_size)

    def run(self) -> None:
        while True:
            self._arrive()
            if not self.running and not self.waiting:
                following = self.arrivals.next
                if math.isinf(following):
                    self._record()
                    return
                self.now = following
                continue
            ahead = self.arrivals.next
            if not self.waiting and self._decoding_only() and self._fast_forward(ahead):
                continue
            scheduled = self.schedule(self)
            if not scheduled:
                raise DlperfError("dlperf's simulated engine stalled: nothing could be scheduled")
            self._step(scheduled)

    # -- arrivals ----------------------------------------------------------------

    def _arrive(self) -> None:
        """The requests that have arrived by now join the waiting queue, up to its window."""
        # Under async scheduling the step about to run was scheduled when the last one
        # began, from the requests there then; an idle engine schedules at once.
        late = self.limits.async_scheduling and self.running
        cutoff = self.last_start if late else self.now
        while (got := self.arrivals.take(cutoff, self.window - len(self.waiting))) is not None:
            chunk, taken = got
            n = taken.stop - taken.start
            slots = self._slots(n)
            numbers = np.arange(self.arrivals.number - n, self.arrivals.number)
            if n == 1:  # one at a time (a rate's arrivals): scalar indices, numpy's fast path
                (slots,), taken, (numbers,) = slots.tolist(), taken.start, numbers.tolist()
            self.number[slots] = numbers
            self.arrival[slots] = chunk.arrival_s[taken]
            self.prompt[slots] = chunk.input_len[taken]
            self.output[slots] = chunk.output_len[taken]
            for name in ("computed", "generated", "held", "admitted", "last_token"):
                getattr(self, name)[slots] = 0
            self.first_token[slots] = np.nan
            if chunk.prefix_len is not None:
                self.shares_prefixes = True
                self.group[slots], self.prefix[slots] = chunk.group[taken], chunk.prefix_len[taken]
            self.stage[slots] = -1 if chunk.stage is None else chunk.stage[taken]
            self.waiting.extend([slots] if n == 1 else slots.tolist())

    def _record(self) -> None:
        """The finished requests gathered so far, into the run's latencies at once."""
        if self.finished:
            arrival, first, now, prompt, output, stage = zip(*self.finished, strict=True)
            finish = np.repeat(now, [len(a) for a in arrival])
            stage = None if stage[0] is None else np.concatenate(stage)
            self.timings.latencies.add(np.concatenate(arrival), np.concatenate(first), finish,
                                       np.concatenate(prompt), np.concatenate(output), stage)
            self.finished = []

    def _slots(self, n: int) -> np.ndarray:
        """`n` free slots (the arrays grown, doubling, when too few are spare)."""
        if n == 1 and self.spare:
            return np.array([self.spare.pop()], np.int64)
        if len(self.spare) < n:
            size = len(self.prompt)
            grown = max(2 * size, size + n - len(self.spare), 64)
            for name in self._INTS + self._FLOATS:
                old = getattr(self, name)
                new = np.zeros(grown, old.dtype)
                new[:size] = old
                setattr(self, name, new)
            self.spare.extend(range(grown - 1, size - 1, -1))
        taken = self.spare[-n:]
        del self.spare[-n:]
        return np.array(taken[::-1], np.int64)

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
            if not self.admitted[r]:
                self.computed[r] = self._cached_at_admission(r)
            remaining = int(self.prompt[r] + self.generated[r] - self.computed[r])
            if whole and remaining > budget:
                break
            new = min(remaining, budget)
            need = self.blocks_for(int(self.computed[r]) + new) - self.held[r]
            if need > self.free:
                break
            self.waiting.popleft()
            self.admitted[r] = 1
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
        if self.shares_prefixes and int(self.group[r]) in self.prefixes_cached:
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
            if self.shares_prefixes and self.computed[r] >= self.prefix[r]:
                self.prefixes_cached.add(int(self.group[r]))
        if emitted:
            self._emit(np.array(emitted, np.int64))

    def _advance(self, seconds: float, batch: int, steps: int = 1, last_s: float = 0.0) -> None:
        """`steps` steps of `seconds` in all, the last of them `last_s` long (0: all one)."""
        self.last_start = self.now + seconds - (last_s or seconds)
        self.now += seconds
        self.timings.steps += steps
        self.timings.busy_s += seconds
        self.timings.batch_total += batch * steps

    def _emit(self, ids: np.ndarray) -> None:
        """Each of `ids` emits one token now; the ones at their last finish."""
        started = self.generated[ids] > 0
        self.timings.itl.add(self.now - self.last_token[ids[started]])
        self.first_token[ids[~started]] = self.now
        self.last_token[ids] = self.now
        self.generated[ids] += 1
        self._finish(ids[self.generated[ids] >= self.output[ids]])

    def _finish(self, ended: np.ndarray) -> None:
        """`ended` finished now: their latencies recorded, their blocks and slots freed."""
        if not len(ended):
            return
        t = self.timings
        if t.finish_s is not None:
            t.first_token_s[self.number[ended]] = self.first_token[ended]
            t.finish_s[self.number[ended]] = self.now
        if t.latencies is not None:
            stage = self.stage[ended] if t.latencies.stages else None
            self.finished.append((self.arrival[ended], self.first_token[ended], self.now,
                                  self.prompt[ended], self.output[ended], stage))  # fmt: skip
            if len(self.finished) >= FINISHED_BATCH:
                self._record()
        gone = set(ended.tolist())
        self.running = [r for r in self.running if r not in gone]
        self.free += int(self.held[ended].sum())
        self.held[ended] = 0
        self.spare.extend(gone)

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
        if self.limits.async_scheduling:  # and the one scheduled before it arrived
            steps = min(steps + 1, len(starts))
        if steps < 2:
            return False
        times = times[:steps]
        held = self.blocks_for(self.computed[ids] + steps)
        self.free -= int((held - self.held[ids]).sum())
        self.held[ids] = held
        self.timings.itl.add(self.now + times[0] - self.last_token[ids])
        self.timings.itl.add(np.repeat(times[1:], len(ids)))
        self._advance(float(times.sum()), len(ids), steps, float(times[-1]))
        self.computed[ids] += steps
        self.generated[ids] += steps
        self.last_token[ids] = self.now
        self._finish(ids[self.generated[ids] >= self.output[ids]])
        return True


def _check_fits(longest: int, limits: EngineLimits) -> None:
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
