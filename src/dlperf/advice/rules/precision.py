"""Tensor Core math: fp32 on a GPU with Tensor Cores trains in TF32 or AMP."""

from __future__ import annotations

from ..context import Step
from ..registry import GETTING_STARTED, TALK, rule
from .common import priced, tensor_cores


def half_dtype(spec) -> str:
    """The 16-bit dtype mixed precision runs in on `spec`: bf16 where Tensor Cores run it."""
    return "bf16" if tensor_cores(spec, "bf16") else "fp16"


def to_amp(ctx, step: Step, finding) -> Step:
    return step._replace(precision=f"amp-{half_dtype(ctx.spec)}")


@rule(
    "tensor-core-precision",
    "fp32 math on a GPU with Tensor Cores: use TF32 or AMP",
    f"{GETTING_STARTED} §2.2; {TALK}, 'Mixed precision training'",
    fix=to_amp,
)
def tensor_core_precision(ctx):
    spec = ctx.spec
    half = half_dtype(spec)
    if ctx.precision.name != "fp32" or spec.kind == "cpu" or not tensor_cores(spec, half):
        return []
    fix = f"train with amp-{half} (autocast{'' if half == 'bf16' else ' and a GradScaler'})"
    if spec.has_dtype("tf32"):
        fix += ", or at least enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True)"
    evidence = {
        "precision": "fp32",
        "contraction_time_s": ctx.analysis.categories["contraction"]["time_s"],
        "tensor_core_dtypes": [d for d, u in spec.math.items() if u.tensor_cores],
    }
    finding = priced(ctx, "tensor-core-precision", ["(model)"], evidence, fix)
    # too small a model: the casts cost more than Tensor Cores save
    return [finding] if finding.gain_time_s > 0 else []
