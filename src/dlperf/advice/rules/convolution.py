"""A convolution's bias followed by batch norm: the norm removes it, so it is
wasted work and memory."""

from __future__ import annotations

from torch import nn

from .. import fixes
from ..context import Step
from ..registry import TALK, module_path, rule
from .common import priced

# Bytes a parameter costs in an AMP step with Adam: its fp32 value and gradient
# (4 + 4), Adam's two fp32 moments (8) and autocast's fp16 copy (2).
BYTES_PER_TRAINED_PARAMETER = 18


def bias_pairs(model: nn.Module, convs) -> tuple[tuple[str, str], ...]:
    """(convolution, the sibling module right after it) for each path in `convs`."""
    pairs = []
    for path in convs:
        parent, _, name = path.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        children = [n for n, _ in owner.named_children()]
        after = children[children.index(name) + 1]
        pairs.append((path, f"{parent}.{after}" if parent else after))
    return tuple(pairs)


def drop_bias(ctx, step: Step, finding) -> Step:
    """The fix: no bias on the finding's convolutions."""
    pairs = bias_pairs(step.model, [module_path(m) for m in finding.modules])
    return step._replace(model=ctx.build(fixes.drop_conv_bias, step.model, pairs))


def _conv_bn_pairs(model: nn.Module) -> list[tuple[str, str]]:
    """(convolution with a bias, batch norm right after it), as module paths."""
    pairs = []
    for path, module in model.named_modules():
        children = list(module.named_children())
        prefix = f"{path}." if path else ""
        for (a, conv), (b, bn) in zip(children, children[1:], strict=False):
            if (
                isinstance(conv, nn.Conv2d)
                and conv.bias is not None
                and isinstance(bn, nn.BatchNorm2d)
            ):
                pairs.append((prefix + a, prefix + b))
    return pairs


@rule(
    "conv-bias-before-bn",
    "convolution bias followed by batch norm is wasted",
    f"{TALK}, 'Optimization techniques'",
    fix=drop_bias,
)
def conv_bias_before_bn(ctx):
    pairs = _conv_bn_pairs(ctx.model)
    if not pairs:
        return []
    params = sum(ctx.model.get_submodule(c).bias.numel() for c, _ in pairs)
    return [
        priced(
            ctx,
            "conv-bias-before-bn",
            [c for c, _ in pairs],
            {"pairs": len(pairs), "bias_parameters": params},
            "bias=False on convolutions followed by BatchNorm (the norm removes it)",
            gain_memory_bytes=params * BYTES_PER_TRAINED_PARAMETER,
        )
    ]
