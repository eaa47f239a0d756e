"""Hierarchical models (the talk's recommendations): memory-limited work in
the early layers, and activations after conv + batch norm that cannot fuse."""

from __future__ import annotations

from torch import nn

from ..registry import TALK, Finding, rule
from .common import severity, share

# Per kind of early memory-limited work: which rows it is, and what to do instead.
EARLY_KINDS = {
    "depthwise convolution": (
        lambda r: r.family == "conv-depthwise",
        "use dense convolutions in the early, memory-limited layers (depthwise is fine "
        "later, where layers are math-limited)",
    ),
    "squeeze-and-excitation pooling": (
        lambda r: (
            r.family == "pooling" and r.op.startswith("aten._adaptive_avg_pool") and "." in r.module
        ),
        "drop squeeze-and-excitation from the early layers; keep it where the layers "
        "are math-limited",
    ),
    "layer norm": (
        lambda r: r.family == "layer_norm",
        "avoid layer norm in the early layers (batch norm folds into the convolution at inference)",
    ),
}
# Activations that need a pass of their own after conv + batch norm (ReLU fuses).
UNFUSED_ACTIVATIONS = (nn.SiLU, nn.GELU, nn.Hardswish, nn.Mish, nn.ELU)


def _early(ctx, fraction: float = 1 / 3) -> set[str]:
    """Modules whose forward runs in the first third of the step's forward ops."""
    forward = [r for r in ctx.analysis.rows if r.phase == "forward" and r.module]
    cut = int(len(forward) * fraction)
    return {r.module for r in forward[:cut]}


@rule(
    "early-layers",
    "memory-limited early layers: depthwise, squeeze-excite, layer norm",
    f"{TALK}, 'Recommendations for hierarchical models'",
)
def early_layers(ctx):
    early = _early(ctx)
    findings = []
    for kind, (match, fix) in EARLY_KINDS.items():
        rows = [r for r in ctx.analysis.rows if r.module in early and match(r)]
        time = sum(r.time_s for r in rows)
        if share(ctx, time) < 0.02:
            continue
        findings.append(
            Finding(
                "early-layers",
                severity(share(ctx, time)),
                sorted({r.module for r in rows})[:8],
                {"kind": kind, "time_s": time, "share": share(ctx, time)},
                fix,
                how="an architecture change: the share of the step these "
                "ops take is shown, no gain is predicted",
            )
        )
    return findings


def _unfused_activations(model: nn.Module) -> list[tuple[str, str]]:
    """(path, type name) of activations right after a conv and a batch norm that
    are not ReLU."""
    found = []
    for path, module in model.named_modules():
        children = list(module.named_children())
        prefix = f"{path}." if path else ""
        for (_, conv), (_, bn), (c, act) in zip(children, children[1:], children[2:], strict=False):
            if (
                isinstance(conv, nn.Conv2d)
                and isinstance(bn, nn.BatchNorm2d)
                and isinstance(act, UNFUSED_ACTIVATIONS)
            ):
                found.append((prefix + c, type(act).__name__))
    return found


@rule(
    "relu-fusion",
    "activation after conv + batch norm that cannot fuse: prefer ReLU",
    f"{TALK}, hierarchical models: 'ReLU is the best activation as it can be fused with conv-BN'",
)
def relu_fusion(ctx):
    found = _unfused_activations(ctx.model)
    if not found:
        return []
    time = sum(r.time_s for r in ctx.analysis.rows for p, _ in found if r.module == p)
    return [
        Finding(
            "relu-fusion",
            severity(share(ctx, time)),
            [p for p, _ in found][:8],
            {"activations": sorted({k for _, k in found}), "count": len(found), "time_s": time},
            "ReLU after conv + batch norm fuses into one kernel (TensorRT, cuDNN "
            "fusions); other activations need a pass of their own",
            how="an architecture change: no gain is predicted",
        )
    ]
