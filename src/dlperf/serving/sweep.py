"""Serving a decoder at every batch size, for the report's Serving section.

`serving_sweep` prices `serve` at batches 1, 2, 4, ... up to past the
largest batch whose KV caches fit (twice it, at most LARGEST_BATCH), all
on one Session, and keeps per batch the figures a deployment is sized by:
time to first token, time per output token, request latency and output
tokens/s per GPU, with whether the batch fits. Batch 1 also gives the
largest batch that fits and the batch from which decode's linear layers
turn math-bound (both independent of the batch: `serve`).

Requests arriving at a rate: the simulator (`serving.simulate`) runs
RATE_PROMPTS requests of the same lengths all at once (the deployment's
capacity, in requests/s) and then at RATE_SHARES of that rate, keeping the
median and P99 of TTFT and TPOT at each (the report draws them against the
rate).

A model that cannot be served (not a decoder, prompt and output longer than
its positions ...) gives a sweep whose `absent` says why, unless the caller
required it: then the one-line `DlperfError` is raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import DlperfError
from ..run import Run, Session
from .api import serve
from .quant import SCHEMES
from .simulate import Simulator

RATE_PROMPTS = 200
RATE_SHARES = (0.125, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25)
# The largest batch drawn: 1024 keeps the sweep at 11 `serve` calls (about
# half a second each for a 7B model, whose trace is reduced to three blocks).
LARGEST_BATCH = 1024


@dataclass(frozen=True)
class ServingPoint:
    """One static batch of requests served on the deployment."""

    batch: int
    ttft_s: float
    tpot_s: float
    latency_s: float
    output_tokens_per_s_per_gpu: float
    memory_per_gpu_bytes: float
    fits: bool


@dataclass(frozen=True)
class RatePoint:
    """Requests arriving at `rate` per second (a Poisson process) on the engine."""

    rate: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    output_tokens_per_s: float


@dataclass
class ServingSweep:
    model: str
    gpu: str
    precision: str
    precision_reason: str  # why this precision (the report's, or the GPU's best half)
    kv_cache_dtype: str = ""
    input_len: int = 0
    output_len: int = 0
    max_batch: int = 0  # the largest batch whose KV caches fit (0: none)
    math_bound_from_batch: int | None = None  # decode's linear layers, None: never
    points: list[ServingPoint] = field(default_factory=list)
    capacity: float = 0.0  # requests/s with all of them sent at once (0: not simulated)
    rates: list[RatePoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    absent: str = ""  # why the model is not served ("" when it is)

    @property
    def batches(self) -> list[int]:
        return [p.batch for p in self.points]


def serving_precision(requested: str | None, spec) -> tuple[str, str]:
    """(serving precision, why): `requested` when it is one (fp16, bf16, fp8,
    int8, int8-weight, int4-weight), else bf16 where the GPU computes in it,
    else fp16."""
    key = str(requested or "").lower()
    if key in SCHEMES:
        return key, f"the report's --precision {key}"
    given = f"--precision {requested} is not a serving precision" if requested else "none given"
    if spec.has_dtype("bf16"):
        return "bf16", f"{given}; {spec.id} computes in bf16"
    return "fp16", f"{given}; {spec.id} has no bf16 math"


def sweep_batches(max_batch: int, largest: int = LARGEST_BATCH) -> list[int]:
    """Powers of two from 1 to the first at or past twice the largest batch
    that fits (so the memory limit lies inside the sweep), at most `largest`."""
    batches = [1]
    while batches[-1] < 2 * max_batch and batches[-1] * 2 <= largest:
        batches.append(batches[-1] * 2)
    if len(batches) == 1 and largest >= 2:  # nothing fits: 1 and 2 show the trend
        batches.append(2)
    return batches


def serving_sweep(
    run: Run,
    precision: str | None = None,
    input_len: int = 128,
    output_len: int = 128,
    session: Session | None = None,
    required: bool = False,
    largest: int = LARGEST_BATCH,
) -> ServingSweep:
    """`run`'s model served on its GPU at every batch size (module docstring).
    `precision`: the report's; None or a training policy picks bf16 or fp16."""
    name, reason = serving_precision(precision, run.spec)
    sweep = ServingSweep(run.name, run.spec.id, name, reason, input_len=input_len)
    sweep.output_len = output_len
    session = session or Session()

    def at(batch: int):
        return serve(
            run,
            precision=name,
            input_len=input_len,
            output_len=output_len,
            batch=batch,
            must_fit=False,
            session=session,
            attention=run.attention,
            cuda_graphs=run.cuda_graphs,
        )

    try:
        first = at(1)
    except DlperfError as err:
        if required:
            raise DlperfError(f"--serve: {err}") from None
        sweep.absent = str(err)
        return sweep
    sweep.kv_cache_dtype, sweep.max_batch = first.kv_cache_dtype, first.max_batch
    sweep.math_bound_from_batch = first.decode.extra.get("math_bound_from_batch")
    sweep.notes = list(first.notes)
    reports = [first] + [at(b) for b in sweep_batches(first.max_batch, largest)[1:]]
    sweep.points = [_point(r) for r in reports]
    _rates(sweep, run, session)
    return sweep


def _rates(sweep: ServingSweep, run: Run, session: Session) -> None:
    """The latencies against the request rate (module docstring), or a note
    saying why there are none."""
    try:
        sim = Simulator(
            run, dataset=f"random:in={sweep.input_len},out={sweep.output_len}",
            num_prompts=RATE_PROMPTS, precision=sweep.precision, session=session,
            attention=run.attention, cuda_graphs=True,
        )  # fmt: skip
        burst = sim.run(math.inf)
    except DlperfError as err:
        sweep.notes.append(f"No request-rate simulation: {err}")
        return
    sweep.capacity = burst.request_throughput
    for share in RATE_SHARES:
        r = sim.run(share * sweep.capacity)
        sweep.rates.append(
            RatePoint(
                r.request_rate,
                r.ttft["p50"],
                r.ttft["p99"],
                r.tpot["p50"],
                r.tpot["p99"],
                r.output_throughput,
            )  # fmt: skip
        )


def _point(report) -> ServingPoint:
    return ServingPoint(
        report.batch,
        report.ttft_s,
        report.tpot_s,
        report.latency_s,
        report.output_tokens_per_s_per_gpu,
        report.memory_per_gpu_bytes,
        report.fits,
    )
