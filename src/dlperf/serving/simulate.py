"""`dlperf.simulate`: a serving benchmark run on a predicted deployment.

Requests from a dataset arrive at a rate (`workload`); an engine with vLLM's
settings batches them continuously over a paged KV cache (`scheduler`); each
step costs what dlperf's traced steps say (`step_costs`). Reported as vLLM's
and SGLang's `benchmark_serving` report a run: request and token
throughputs; TTFT, TPOT, ITL and E2E latency as mean, median, P90 and P99;
goodput under an SLO; and, with `find_max_rate`, the largest request rate
whose P99 latencies meet the SLO.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import DlperfError
from ..jsonable import Jsonable, fields_dict
from ..run import Session, run_config
from ..run_config import RunConfig
from .deployment import deploy
from .latencies import Latencies
from .memory import default_max_num_seqs
from .scheduler import EngineLimits, Timings, run_engine, scheduling_policy
from .step_costs import StepCosts
from .workload import parse_stages, requests, stage_counts

PERCENTILES = (50, 90, 99)
# benchmark_serving's random dataset (its prompt count: workload.DEFAULT_PROMPTS)
DEFAULT_DATASET = "random:in=1024,out=128"
# Requests of the burst that measures the sustainable rate: several times the
# engine's sequences, so that the ramp and the drain weigh little.
SUSTAINABLE_PROMPTS = 1000
# Rates tried by `find_max_rate`: doubling from the first, then this many halvings.
BISECTIONS = 8


@dataclass(frozen=True)
class Slo(Jsonable):
    """Latency limits in seconds (None: no limit) that every request must meet."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, ttft, tpot, e2e) -> np.ndarray:
        ok = np.ones(len(ttft), bool)
        for limit, values in ((self.ttft_s, ttft), (self.tpot_s, tpot), (self.e2e_s, e2e)):
            if limit is not None:
                ok &= values <= limit
        return ok


_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}


def parse_slo(text: str) -> Slo:
    """`ttft=500ms,tpot=50ms[,e2e=10s]` (units ms, s or us; bare numbers are ms,
    as vLLM's --goodput takes them)."""
    found = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        match = re.fullmatch(r"([0-9.]+(?:e-?[0-9]+)?)\s*(ms|s|us)?", value.strip())
        if f"{key}_s" in found:
            raise DlperfError(f"--slo {text!r} gives {key} twice: give each limit once")
        if not eq or key not in ("ttft", "tpot", "e2e") or not match:
            raise DlperfError(
                f"--slo {text!r}: expected ttft=500ms,tpot=50ms (keys ttft, tpot, e2e; "
                f"units ms, s or us), not {part!r}"
            )
        seconds = float(match[1]) * _UNITS[match[2] or "ms"]
        if not seconds > 0:
            raise DlperfError(f"--slo {text!r}: {key} must be a positive time")
        found[f"{key}_s"] = seconds
    return Slo(**found)


@dataclass
class SimulationReport:
    """A serving benchmark on the deployment; latencies in seconds."""

    model: str
    gpu: str
    precision: str
    tp: int
    pp: int
    dataset: str
    num_prompts: int
    request_rate: float
    engine: dict
    completed: int = 0
    duration_s: float = 0.0
    request_throughput: float = 0.0
    input_throughput: float = 0.0
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    ttft: dict = field(default_factory=dict)
    tpot: dict = field(default_factory=dict)
    itl: dict = field(default_factory=dict)
    e2e: dict = field(default_factory=dict)
    slo: Slo | None = None
    goodput: float | None = None  # requests per second that met the SLO
    slo_attainment: float | None = None  # their share
    steps: int = 0
    preemptions: int = 0
    mean_batch: float = 0.0
    max_rate: dict | None = None  # find_max_rate's answer
    # requests/s the engine completes with the queue never empty (a burst of the
    # same requests): above it the queue grows without bound
    sustainable_rate: float | None = None
    saturated: bool | None = None  # the offered rate (a stage's, at most) exceeds it
    stages: list[dict] = field(default_factory=list)  # per stage of a staged load
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The fields with the SLO last, and an unbounded request rate (every
        request at once) as null: JSON has no infinity."""
        rate = None if math.isinf(self.request_rate) else self.request_rate
        return fields_dict(self, last=("slo",)) | {"request_rate": rate}


def _fill(report: SimulationReport, done: Latencies, timings: Timings) -> None:
    duration = done.last_finish_s - done.first_arrival_s
    report.completed = done.count
    report.duration_s = duration
    report.request_throughput = done.count / duration
    report.input_throughput = done.input_tokens / duration
    report.output_throughput = done.output_tokens / duration
    report.total_token_throughput = report.input_throughput + report.output_throughput
    report.ttft, report.tpot, report.e2e = (
        m.stats(PERCENTILES) for m in (done.ttft, done.tpot, done.e2e)
    )
    report.itl = timings.itl.stats(PERCENTILES)
    report.steps, report.preemptions = timings.steps, timings.preemptions
    report.mean_batch = timings.batch_total / timings.steps if timings.steps else 0.0
    if done.slo is not None:
        report.slo, report.slo_attainment = done.slo, done.met / done.count
        report.goodput = done.met / duration


def _stage_reports(done: Latencies, stages: list) -> list[dict]:
    """Each stage's requests (those it sent): their latencies, as the whole run's."""
    out = []
    for i, ((rate, seconds), part) in enumerate(zip(stages, done.stages, strict=True)):
        out.append({
            "stage": i, "request_rate": rate, "duration_s": seconds, "num_prompts": part.count,
            "output_len_mean": part.output_tokens / part.count,
            **{name: getattr(part, name).stats(PERCENTILES) for name in ("ttft", "tpot", "e2e")},
        })  # fmt: skip
    return out


def _prompts(serving, stages) -> int | None:
    """Requests simulated: the stages' (int(rate x seconds) each), else
    --num-prompts (None: the dataset's default, `workload.requests`)."""
    if stages is None:
        return serving.num_prompts
    if serving.request_rate is not None:
        raise DlperfError("give --stages or --request-rate, not both: each stage has its rate")
    sent = sum(stage_counts(stages))
    if serving.num_prompts is not None and serving.num_prompts != sent:
        raise DlperfError(
            f"--stages {serving.stages} sends {sent} requests (int(rate x seconds) a stage): "
            "drop --num-prompts"
        )
    return sent


def _check_timed(dataset: str, serving) -> None:
    """A dataset of timestamps sets the arrivals: a flag that sets them too is refused."""
    clash = next((flag for flag, given in (
        ("--request-rate", serving.request_rate is not None),
        ("--stages", bool(serving.stages)),
        ("--find-max-rate", serving.find_max_rate),
    ) if given), None)  # fmt: skip
    if clash:
        raise DlperfError(
            f"--dataset {dataset} gives each request's arrival_s, which set the arrivals: "
            f"drop {clash}, or drop arrival_s from the file to draw arrivals at a rate"
        )


class Simulator:
    """One deployment and its engine settings, simulated at any request rate."""

    def __init__(self, model, config: RunConfig | None = None, *,
                 session: Session | None = None, **options):  # fmt: skip
        config = run_config(None, config, **options).check("serve")
        serving = config.serving
        scheduling_policy(serving.scheduler)  # an unknown policy is refused before tracing
        self.dataset = serving.dataset or DEFAULT_DATASET
        self.stages = parse_stages(serving.stages) if serving.stages else None
        # a bad dataset fails before tracing
        self.requests = requests(self.dataset, _prompts(serving, self.stages), serving.seed)
        self.num_prompts = self.requests.count
        self.timed = self.requests.given_arrival_s is not None
        if self.timed:
            _check_timed(self.dataset, serving)
        # vLLM's engine: its own all-reduce kernel where NVLink connects the GPUs
        self.d = deploy(model, config, session, custom_all_reduce=True)
        self.max_num_seqs = serving.max_num_seqs or default_max_num_seqs(self.d.spec)
        longest = self.requests.longest
        self.d.check_request(longest)
        timeline = self.d.timeline(self.requests.longest_input, self.requests.longest_output)
        # one sequence traced stands for a step's tokens: no longer than the model's positions
        positions = self.d.context_tokens or self.d.max_num_batched_tokens
        traced = min(self.d.max_num_batched_tokens, positions)
        prefill, _ = timeline.prefill_tokens(traced)
        fixed, per_token = self.d.memory(prefill)
        free = self.d.budget_bytes - fixed.total_bytes
        self.memory = {**fixed.to_dict(), "budget_bytes": self.d.budget_bytes}
        blocks = int(free // (per_token * self.d.block_size)) if free > 0 else 0
        self.memory["kv_cache_bytes"] = blocks * per_token * self.d.block_size
        self.limits = EngineLimits(
            self.max_num_seqs, self.d.max_num_batched_tokens, blocks, self.d.block_size,
            serving.chunked_prefill, serving.prefix_cache_hit_rate, serving.scheduler,
            serving.async_scheduling,
        )  # fmt: skip
        # the last decode step reads prompt + output - 2 cached tokens
        self.costs = StepCosts(timeline, self.max_num_seqs, traced, longest - 2)

    def run(self, request_rate: float, slo: Slo | None = None) -> SimulationReport:
        done = Latencies(slo)
        timings = run_engine(self.requests.arriving(request_rate), self.limits, self.costs, done)
        report = self._report(request_rate)
        _fill(report, done, timings)
        return report

    def run_stages(self, slo: Slo | None = None) -> SimulationReport:
        """The staged load (`--stages`): the whole run's figures, and each stage's."""
        done = Latencies(slo, stages=len(self.stages))
        timings = run_engine(self.requests.staged(self.stages), self.limits, self.costs, done)
        seconds = sum(duration for _, duration in self.stages)
        report = self._report(self.num_prompts / seconds)
        _fill(report, done, timings)
        report.stages = _stage_reports(done, self.stages)
        return report

    def sustainable_rate(self, most: int = SUSTAINABLE_PROMPTS) -> float:
        """Requests per second the engine completes with its queue never empty:
        the first `most` requests sent at once, completed over the time they take."""
        done = Latencies()
        run_engine(self.requests.subset(most).arriving(math.inf), self.limits, self.costs, done)
        return done.count / done.last_finish_s

    def _report(self, request_rate: float) -> SimulationReport:
        d = self.d
        engine = {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": d.max_num_batched_tokens,
            "gpu_memory_utilization": d.gpu_memory_utilization,
            "block_size": d.block_size,
            "kv_cache_blocks": self.limits.kv_blocks,
            "chunked_prefill": self.limits.chunked_prefill,
            "async_scheduling": self.limits.async_scheduling,
            "scheduler": self.limits.scheduling.name,
            "prefix_cache_hit_rate": self.limits.prefix_cache_hit_rate,
            "memory": self.memory,
        }
        return SimulationReport(
            d.run.name, d.spec.id, d.scheme.name, d.tp, d.pp, self.dataset, self.num_prompts,
            request_rate, engine,
        )  # fmt: skip

    def find_max_rate(self, slo: Slo, start: float = 0.5) -> tuple[float, SimulationReport]:
        """The largest request rate whose P99 TTFT, TPOT and E2E meet `slo`
        (doubling from `start`, then bisecting; inf when all requests sent at
        once meet it), and the run at it."""

        def meets(report: SimulationReport) -> bool:
            limits = ((slo.ttft_s, report.ttft), (slo.tpot_s, report.tpot), (slo.e2e_s, report.e2e))
            return all(
                limit is None or stats["p99"] is None or stats["p99"] <= limit
                for limit, stats in limits
            )

        burst = self.run(math.inf, slo)
        if meets(burst):  # no rate is too high: the queue of all of them meets it
            return math.inf, burst
        low, high, best = 0.0, start, None
        while high < burst.request_throughput * 64:  # far past capacity it cannot meet it
            report = self.run(high, slo)
            if not meets(report):
                break
            low, best, high = high, report, high * 2
        for _ in range(BISECTIONS):
            middle = (low + high) / 2
            report = self.run(middle, slo)
            if meets(report):
                low, best = middle, report
            else:
                high = middle
        if best is None:
            raise DlperfError(
                f"no request rate down to {high:.3g}/s meets the SLO "
                f"({_slo_text(slo)}): the deployment misses it even unloaded"
            )
        return low, best


def _mean_rate(arrival_s: np.ndarray) -> float:
    """Requests per second of a trace: its gaps' mean, inverted (inf: all at once)."""
    span = float(np.max(arrival_s) - np.min(arrival_s))
    return (len(arrival_s) - 1) / span if span > 0 else math.inf


def _saturation(report: SimulationReport, sustainable: float, offered: float) -> None:
    report.sustainable_rate, report.saturated = sustainable, offered > sustainable
    if report.saturated:
        report.notes.append(
            f"{offered:g} requests/s exceeds what the engine sustains, {sustainable:.3g}/s "
            f"(by {offered / sustainable - 1:.0%}): the queue grows while the load lasts, "
            "and so do the latencies"
        )


def _slo_text(slo: Slo) -> str:
    parts = [f"{k} {v * 1e3:g} ms" for k, v in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s),
                                                ("e2e", slo.e2e_s)) if v is not None]  # fmt: skip
    return ", ".join(parts)


def simulate(model, config: RunConfig | None = None, **options) -> SimulationReport:
    """Simulate a serving benchmark of `model` (module docstring).

    `dataset`: random:in=I,out=O[,range=F], FILE.jsonl or FILE.json
    (`serving.workload`); `request_rate` in requests/s (inf: all at once);
    `slo` like "ttft=500ms,tpot=50ms"; `find_max_rate` searches the largest
    rate whose P99 latencies meet it. The engine: `max_num_seqs` (default
    vLLM's for the GPU), `chunked_prefill`, `prefix_cache_hit_rate`; the
    deployment's options are `serve`'s (gpu, precision, tp, pp,
    kv_cache_dtype, cuda_graphs, max_num_batched_tokens,
    gpu_memory_utilization, block_size, ...)."""
    config = run_config(None, config, **options)
    slo, find_max_rate = config.serving.slo, config.serving.find_max_rate
    if isinstance(slo, str):
        slo = parse_slo(slo)
    if find_max_rate and slo is None:
        raise DlperfError("--find-max-rate needs an --slo, like --slo ttft=500ms,tpot=50ms")
    simulator = Simulator(model, config)
    if not find_max_rate:
        if simulator.stages:
            report = simulator.run_stages(slo)
            offered = max(rate for rate, _ in simulator.stages)
        elif simulator.timed:
            report = simulator.run(math.inf, slo)  # the file's arrival_s, whatever the rate
            offered = report.request_rate = _mean_rate(simulator.requests.given_arrival_s)
            report.notes.append(f"requests arrive at the arrival_s of {simulator.dataset}")
        else:
            offered = config.serving.request_rate
            offered = math.inf if offered is None else offered
            report = simulator.run(offered, slo)
        if math.isfinite(offered):
            _saturation(report, simulator.sustainable_rate(), offered)
        return report
    rate, report = simulator.find_max_rate(slo)
    report.max_rate = {
        "request_rate": None if math.isinf(rate) else rate,
        "criterion": f"P99 within {_slo_text(slo)}",
    }
    if math.isinf(rate):
        report.notes.append("the SLO holds even with every request sent at once")
    return report
