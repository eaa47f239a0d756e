"""2:4 structured sparsity: where pruning the linear layers would pay.

The talk behind the guides lists Ampere's 2:4 sparsity (two of every four
weights zero, pruned by magnitude, often fine-tuned after) among the ways
to do more with less. Pruning changes the model's outputs, so this is
advice with its predicted gain, never an automatic or output-preserving fix.
"""

from __future__ import annotations

import dataclasses

from ...ops.linear import is_linear_module
from ...precision import sparsity_refusal, with_sparsity
from ..registry import TALK, Finding, rule
from .common import MIN_SHARE, severity, share

# A GEMM is large enough for the sparse path to pay when each of its sides is
# at least this (smaller ones are latency- or memory-bound: half the math saves
# little there).
MIN_SIDE = 256


def _math_bound_linear_layers(ctx) -> dict[str, float]:
    """Seconds of math-bound, large GEMMs per linear layer."""
    types = {name: type(m).__name__ for name, m in ctx.model.named_modules()}
    layers: dict[str, float] = {}
    for r in ctx.analysis.rows:
        if r.bound != "math" or r.category != "contraction":
            continue
        if not is_linear_module(types.get(r.module, "")):
            continue
        if any(min(g.m, g.n, g.k) >= MIN_SIDE for g in r.gemms):
            layers[r.module] = layers.get(r.module, 0.0) + r.time_s
    return layers


@rule(
    "sparsity-2-4",
    "math-bound linear layers that 2:4 structured sparsity would speed up (changes outputs)",
    f"{TALK}, 'Sparsity' (Ampere's 2:4 structured sparsity)",
    changes_outputs=True,
)
def sparsity_2_4(ctx):
    if ctx.precision.sparse_linear or sparsity_refusal(ctx.spec, ctx.precision):
        return []
    layers = _math_bound_linear_layers(ctx)
    if not layers:
        return []
    named = sorted(layers, key=layers.get, reverse=True)
    policy = with_sparsity(ctx.spec, ctx.precision, "2:4")
    after = ctx.session.analysis(dataclasses.replace(ctx.run, precision=policy, sparsity="2:4"))
    saved = ctx.step_time_s - after.time_s
    fraction = share(ctx, saved)
    if fraction < MIN_SHARE:
        return []
    evidence = {m: {"math_bound_time_s": layers[m]} for m in named[:8]}
    fix = (
        "prune these linear layers' weights 2:4 (two of every four zero, by magnitude, then "
        "fine-tune) and run them as semi-structured sparse tensors (cuSPARSELt): forward and "
        "input-gradient GEMMs at half the math. It changes the model's outputs: check its "
        f"accuracy (`--sparsity 2:4` prices it). Largest: {', '.join(named[:3])}"
    )
    finding = Finding("sparsity-2-4", severity(fraction), named, evidence, fix, saved, fraction)
    finding.how = "re-analysed with --sparsity 2:4 (every linear layer pruned)"
    return [finding]
