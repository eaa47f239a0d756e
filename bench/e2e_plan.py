"""The multi-GPU rows of `bench/e2e.py`: dlperf's price of the exact published
plan, whether dlperf judges it to fit, and where dlperf's own search ranks it.

For each row two `dlperf.plan` calls share one session (one trace):
- forced: every dimension as published (dp, tp, pp, sharding, checkpointing,
  micro-batch); its throughput is compared with the published figure;
- searched: the same GPUs, global batch and micro-batch, every other
  dimension searched (tp, pp, cp, sharding, schedule, sequence parallelism,
  checkpointing). The published plan's rank is 1 + the layouts that fit and
  are predicted faster; `slower` is its step over the best plan's, less 1.

Targets (issue 13): every published plan judged to fit, and within 15% of
dlperf's best plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WITHIN_BEST = 0.15  # the published plan within 15% of dlperf's best


@dataclass
class PlanCheck:
    exposed_share: float  # of the published plan's step, communication not hidden
    samples_per_s: float
    fits: bool
    memory_gib: float
    rank: int  # among the layouts that fit, fastest first (1: dlperf's best)
    layouts: int  # layouts that fit
    slower_than_best: float  # published step / best step - 1 (nan: nothing fits)
    best: str

    @property
    def remark(self) -> str:
        fit = "fits" if self.fits else "judged not to fit"
        fit += f" ({self.memory_gib:.1f} GiB), comm exposed {self.exposed_share:.0%}"
        if math.isnan(self.slower_than_best):
            return f"{fit}; no searched plan fits"
        return (
            f"{fit}; rank {self.rank} of {self.layouts}, "
            f"{self.slower_than_best:+.0%} vs best {self.best}"
        )


def check_plan(case, session) -> PlanCheck:
    """The published plan of a multi-GPU row, priced, and ranked among dlperf's."""
    import dlperf
    from dlperf.run import resolve

    row = case.row
    # one run, one session: both plans read one trace
    run = resolve(case.model, batch=case.batch, seq_len=case.seq_len, **case.run_options)
    common = dict(
        gpus=int(row["gpus"]),
        gpus_per_node=int(row["gpus_per_node"]),
        global_batch=int(row["global_batch"]),
        micro_batch=case.batch,
        session=session,
    )
    forced = dlperf.plan(run, **common, **case.parallel, checkpoint=run.checkpoint)
    published = forced.plans[0]
    # every other dimension, checkpointing too (None: searched, whatever the run's)
    searched = dlperf.plan(run, **common, checkpoint=None)
    fitting = [p for p in searched.plans if p.fits]
    faster = [p for p in fitting if p.step_time_s < published.step_time_s]
    best = fitting[0] if fitting else None
    slower = published.step_time_s / best.step_time_s - 1 if best else math.nan
    return PlanCheck(
        exposed_share=published.exposed_comm_s / published.step_time_s,
        samples_per_s=published.samples_per_s,
        fits=published.fits,
        memory_gib=published.memory_per_gpu_bytes / 2**30,
        rank=len(faster) + 1,
        layouts=len(fitting),
        slower_than_best=slower,
        best=best.name if best else "",
    )


def summary(checks: list[PlanCheck]) -> str:
    """One line: how many published plans fit, and how many lie within 15% of the best."""
    if not checks:
        return ""
    fit = sum(c.fits for c in checks)
    near = sum(c.slower_than_best <= WITHIN_BEST for c in checks)
    return (
        f"published plans judged to fit: {fit} of {len(checks)}; within "
        f"{WITHIN_BEST:.0%} of dlperf's best plan: {near} of {len(checks)}"
    )
