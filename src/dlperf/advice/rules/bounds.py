"""What limits the step: memory-bound element-wise work, launch latency, and
GEMMs too small (a small batch) to be math-limited."""

from __future__ import annotations

from ...training_memory import resize_inputs
from ..registry import GETTING_STARTED, MEMORY_LIMITED, TALK, Finding, rule
from .common import MIN_SHARE, severity, share

# Share of the per-kernel launch latency CUDA graphs or torch.compile remove.
LATENCY_REMOVED = 0.8


@rule(
    "memory-bound-share",
    "normalization and element-wise ops take much of the step",
    f"{TALK}, operator classes (% flop vs % runtime); {MEMORY_LIMITED}, chapter 1 checklist",
)
def memory_bound_share(ctx):
    cats = ctx.analysis.categories
    total = ctx.step_time_s
    bound_share = (cats["normalization"]["time_s"] + cats["elementwise"]["time_s"]) / total
    if bound_share < 0.25 or ctx.run.compile:
        return []
    # priced by re-analysing the same step as torch.compile runs it
    # (step times: compiling also changes what the host issues)
    compiled = ctx.reanalyze_run(compile=True)
    saved = ctx.analysis.step_time_s - compiled.step_time_s
    fraction = saved / ctx.analysis.step_time_s
    if fraction < MIN_SHARE:
        return []
    fusion = compiled.fusion
    evidence = {
        "normalization_and_elementwise_share": bound_share,
        "flop_share": (cats["normalization"]["flops"] + cats["elementwise"]["flops"])
        / max(ctx.analysis.totals["flops"], 1),
        "kernels_before": fusion.kernels_before,
        "kernels_after": fusion.kernels_after,
    }
    return [
        Finding(
            "memory-bound-share",
            severity(fraction),
            ["(model)"],
            evidence,
            "fuse element-wise chains: torch.compile(model) (or fused bias+activation and "
            "residual+norm kernels); at inference fold batch norm into convolutions",
            saved,
            fraction,
            how="priced by re-analysing the step compiled (`--compile`): each chain of "
            "element-wise, reduction and norm ops between GEMMs as one kernel",
        )
    ]


@rule(
    "latency-bound",
    "many tiny kernels: launch latency dominates",
    f"{TALK}, 'How to find a problem?' (latency limit)",
)
def latency_bound(ctx):
    rows = [r for r in ctx.analysis.rows if r.bound == "latency"]
    time = sum(r.time_s for r in rows)
    if share(ctx, time) < 0.2:
        return []
    latency = ctx.spec.efficiency.kernel_latency_s
    saved = sum(min(r.time_s, latency * r.kernels) for r in rows) * LATENCY_REMOVED
    fraction = saved / ctx.step_time_s
    return [
        Finding(
            "latency-bound",
            severity(fraction),
            sorted({r.module for r in rows})[:10],
            {"latency_bound_ops": len(rows), "share_of_step": share(ctx, time)},
            "capture the step in CUDA graphs or torch.compile(mode='reduce-overhead'); "
            "or grow the batch",
            saved,
            fraction,
            how=f"priced as removing {LATENCY_REMOVED:.0%} of the per-kernel launch latency",
        )
    ]


@rule(
    "small-batch",
    "batch too small for the GEMMs to be math-limited",
    f"{GETTING_STARTED} §2.1; {TALK}, 'Linear layers' (batch > 128)",
)
def small_batch(ctx):
    rows = [r for r in ctx.analysis.rows if r.category == "contraction" and r.bound != "math"]
    time = sum(r.time_s for r in rows)
    if share(ctx, time) < 0.3 or ctx.analysis.batch >= 512:
        return []
    doubled = 2 * ctx.analysis.batch
    after = ctx.reanalyze(inputs=resize_inputs(ctx.inputs, batch=doubled))
    gain, fraction = ctx.gain_of(after, per_sample=True)
    if fraction < 0.05:
        return []
    return [
        Finding(
            "small-batch",
            severity(fraction),
            sorted({r.module for r in rows})[:10],
            {"batch": ctx.analysis.batch, "non_math_contraction_share": share(ctx, time)},
            f"raise the batch (x2 = {doubled}) or accumulate fewer, larger micro-batches",
            gain,
            fraction,
            how=f"re-analysed at batch {doubled}, per sample",
        )
    ]
