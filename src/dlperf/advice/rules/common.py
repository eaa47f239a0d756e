"""What the rules of several families share: shares of the step, severity,
and a finding priced by its rule's own fix."""

from __future__ import annotations

from ...tracing import within
from ..registry import RULES, Finding

# A layer whose ops take less than this share of the step is not worth a finding.
MIN_SHARE = 0.005


def share(ctx, seconds: float) -> float:
    return seconds / ctx.step_time_s if ctx.step_time_s else 0.0


def severity(fraction: float) -> str:
    return "high" if fraction >= 0.10 else "medium" if fraction >= 0.02 else "low"


def rows_of(ctx, path: str):
    return [r for r in ctx.analysis.rows if within(r.module, path)]


def tensor_cores(spec, dtype: str) -> bool:
    """Whether the device runs `dtype` math on Tensor Cores."""
    return spec.has_dtype(dtype) and spec.uses_tensor_cores(dtype)


def priced(ctx, rule_id: str, modules, evidence: dict, fix: str, **extra) -> Finding:
    """A finding of `rule_id` whose gain is the step minus the step re-analysed
    with the rule's registered fix applied: what is priced is what is applied."""
    finding = Finding(rule_id, "low", modules, evidence, fix, **extra)
    after = ctx.reanalyze(*RULES[rule_id].fix(ctx, ctx.step, finding))
    finding.gain_time_s, finding.gain_fraction = ctx.gain_of(after)
    finding.severity = severity(finding.gain_fraction)
    return finding
