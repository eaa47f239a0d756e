"""Settings that change no predicted time: loss scaling, bf16, cuDNN autotuning."""

from __future__ import annotations

from ..registry import TALK, Finding, rule
from .common import tensor_cores


def _setting(evidence: dict, fix: str) -> Finding:
    how = "a setting: no time change predicted"
    return Finding("precision-settings", "low", ["(model)"], evidence, fix, how=how)


@rule(
    "precision-settings",
    "precision settings: loss scaling and bf16",
    f"{TALK}, 'Mixed precision training': 'How to use it?' (GradScaler), 'A note on data types'",
)
def precision_settings(ctx):
    name = ctx.precision.name
    findings = []
    if name in ("amp-fp16", "fp16") and ctx.training:
        fix = "scale the loss with torch.amp.GradScaler"
        if tensor_cores(ctx.spec, "bf16"):
            fix += f"; or use {'amp-bf16' if name == 'amp-fp16' else 'bf16'}: same speed on "
            fix += f"{ctx.spec.id}, fp32's range, no scaler"
        findings.append(_setting({"precision": name}, fix))
    if any(r.family == "conv" for r in ctx.analysis.rows):
        fix = "set torch.backends.cudnn.benchmark = True for static shapes"
        findings.append(_setting({"convolutions": True}, fix))
    return findings
