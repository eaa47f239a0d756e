"""How many GPUs for a training run: time, GPU-hours and cost, under a deadline
(`dlperf plan --gpus 8,16,32 --tokens N --rank cost --deadline 14d`).

Each GPU count's best plan (`plan_report`) runs the run's work (`--tokens`,
or `--steps` of the global batch) at its throughput: the run takes work /
rate, and costs its GPUs times that in GPU-hours, at `--price-per-gpu-hour`
when given. More GPUs finish sooner but, as communication and bubbles grow,
each does less: ranked by time the largest count that scales wins, ranked by
cost the one that wastes least, among those that meet the deadline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DlperfError
from ..jsonable import Jsonable

UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
RANKS = ("time", "cost")


def parse_deadline(text: str) -> float:
    """'14d', '36h', '90m', '3600s' or seconds, as seconds."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhdw]?)\s*", str(text))
    if not found or float(found.group(1)) <= 0:
        raise DlperfError(f"--deadline {text!r}: give a duration such as 14d, 36h or 90m")
    return float(found.group(1)) * UNITS_S[found.group(2) or "s"]


@dataclass(frozen=True)
class RunChoice(Jsonable):
    """One GPU count's best plan, run for the whole run."""

    gpus: int
    plan: str
    step_s: float
    run_s: float
    gpu_hours: float
    cost: float | None  # at the price per GPU-hour; None without one
    meets_deadline: bool


def run_choices(
    reports,
    tokens: float | None = None,
    steps: int | None = None,
    price: float | None = None,
    deadline_s: float | None = None,
) -> list[RunChoice]:
    """Each report's (one per GPU count) best fitting plan, run for `tokens`
    tokens or `steps` steps; counts where nothing fits are left out."""
    if not tokens and not steps:
        raise DlperfError("a run needs its length: give --tokens N or --steps N")
    out, batches = [], {}
    for r in reports:
        best = r.plans[0] if r.plans and r.plans[0].fits else None
        if best is None:
            continue
        if tokens:
            if not best.tokens_per_s:
                raise DlperfError("--tokens needs a model that reads tokens: give --steps N")
            run_s = tokens / best.tokens_per_s
        else:
            run_s = steps * best.step_time_s
        hours = r.gpus * run_s / 3600
        meets = deadline_s is None or run_s <= deadline_s
        cost = price * hours if price is not None else None
        out.append(RunChoice(r.gpus, best.name, best.step_time_s, run_s, hours, cost, meets))
        batches[r.gpus] = round(best.samples_per_s * best.step_time_s)
    if steps and not tokens and len(set(batches.values())) > 1:
        each = ", ".join(f"{b:,} on {g}" for g, b in batches.items())
        raise DlperfError(
            f"--steps {steps} of these plans are different amounts of work: their global "
            f"batches grow with the GPU count ({each}); give --global-batch, or --tokens"
        )
    return out


def ranked_choices(choices: list[RunChoice], rank: str) -> list[RunChoice]:
    """Those that meet the deadline first, each group by time or by cost (GPU-hours
    stand for cost without a price: the same order)."""
    if rank not in RANKS:
        raise DlperfError(f"unknown --rank {rank!r}; choose from: {', '.join(RANKS)}")

    def key(c: RunChoice):  # a tie broken by the other measure: the faster, the cheaper
        if rank == "time":
            return (not c.meets_deadline, c.run_s, c.gpu_hours)
        return (not c.meets_deadline, c.gpu_hours, c.run_s)

    return sorted(choices, key=key)
