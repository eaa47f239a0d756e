"""Convolution layout: NHWC (channels_last) for Tensor Core kernels, and the
first convolution's input channels padded to 4."""

from __future__ import annotations

from torch import nn

from ...kinds import LossKind
from .. import fixes
from ..context import Step
from ..registry import TALK, Finding, module_path, rule
from .common import priced, severity, tensor_cores


def to_channels_last(ctx, step: Step, finding=None) -> Step:
    """The fix: the model and its 4-D inputs in channels_last."""
    model, inputs = ctx.build(fixes.channels_last, step.model, step.inputs)
    return step._replace(model=model, inputs=inputs)


def pad_first_channels(ctx, step: Step, finding) -> Step:
    """The fix: the first convolution's input padded with zero channels, in NHWC."""
    path, channels = module_path(finding.modules[0]), finding.evidence["padded"]
    padded = ctx.build(fixes.pad_first_conv, step.model, path, channels)
    return to_channels_last(ctx, step._replace(model=padded))


def transposes_layout(row) -> bool:
    """Whether an op pays the layout loss: NCHW data a Tensor Core kernel
    transposes to NHWC and back."""
    return any(loss.kind == LossKind.LAYOUT for loss in row.losses)


@rule(
    "channels-last",
    "NCHW convolutions on Tensor Cores: use channels_last (NHWC)",
    f"{TALK}, 'Convolutions' (NHWC layout)",
    fix=to_channels_last,
)
def channels_last_rule(ctx):
    rows = [r for r in ctx.analysis.rows if transposes_layout(r)]
    if not rows:
        return []
    finding = priced(
        ctx,
        "channels-last",
        sorted({r.module for r in rows}),
        {"nchw_conv_ops": len(rows), "time_s": sum(r.time_s for r in rows)},
        "model.to(memory_format=torch.channels_last) and the same for inputs",
    )
    return [finding] if finding.gain_time_s > 0 else []


@rule(
    "first-conv-channels",
    "first convolution with 3 input channels: pad to 4 or 8",
    f"{TALK}, 'Convolutions', figure 8 (C = 4 or a multiple of 8)",
    fix=pad_first_channels,
    priced_alone=False,  # its gain is measured on top of channels_last
)
def first_conv_channels(ctx):
    convs = ctx.modules_of_type(nn.Conv2d)
    if not convs or ctx.spec.kind == "cpu":
        return []
    path, conv = convs[0]
    if conv.in_channels % 8 == 0 or conv.in_channels == 4 or conv.groups != 1:
        return []
    if not tensor_cores(ctx.spec, ctx.contraction_dtype()):
        return []
    finding = Finding(
        "first-conv-channels",
        "low",
        [path],
        {"in_channels": conv.in_channels, "padded": 4},
        f"pad {path}'s input to 4 channels in NHWC (cuDNN has kernels specialised "
        "for C = 4; or use a multiple of 8)",
        how="re-analysed in NHWC, with and without the fourth channel",
    )
    nhwc = ctx.reanalyze(*to_channels_last(ctx, ctx.step))
    padded = ctx.reanalyze(*pad_first_channels(ctx, ctx.step, finding))
    gain = nhwc.time_s - padded.time_s
    if gain > 0:
        finding.gain_time_s, finding.gain_fraction = gain, gain / ctx.step_time_s
        finding.severity = severity(finding.gain_fraction)
    else:
        # The GEMM model prices C = 4 as a plain misaligned GEMM; cuDNN's kernels
        # specialised for it (the talk's figure 8) are outside the model.
        finding.how = (
            "no gain predicted: dlperf's GEMM model does not know cuDNN's "
            f"kernels specialised for C = 4 (figure 8 of the {TALK})"
        )
    return [finding]
