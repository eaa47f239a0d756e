"""GPU memory: a training step that does not fit, and what would make it fit."""

from __future__ import annotations

from ...training_memory import memory_report
from ..registry import TALK, Finding, rule


@rule(
    "memory-fit",
    "the training step does not fit in GPU memory",
    f"{TALK}, 'GPU memory', 'Gradient accumulation', 'Activation recompute'",
)
def memory_fit(ctx):
    if not ctx.training:
        return []
    report = memory_report(ctx.run, ctx.session)
    if report.fits:
        return []
    options = [
        f"checkpoint {p['checkpoint']} (peak {p['peak_bytes'] / 2**30:.1f} GiB,"
        f" +{p['recompute_s'] * 1e3:.0f} ms recompute)"
        for p in report.policies
        if p["fits"]
    ]
    options.append("8-bit Adam (2 B/param of states instead of 8)")
    options.append("ZeRO/FSDP over several GPUs (`dlperf plan`)")
    return [
        Finding(
            "memory-fit",
            "high",
            ["(model)"],
            {"peak_bytes": report.peak_bytes, "capacity_bytes": report.capacity_bytes},
            "; ".join(options),
            0.0,
            0.0,
            gain_memory_bytes=report.peak_bytes - report.capacity_bytes,
            how="dlperf memory, per option",
        )
    ]
