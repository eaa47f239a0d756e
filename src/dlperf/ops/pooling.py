"""Pooling and resampling: memory-bound.

Forward reads the input once (each element is reused by up to
win_h x win_w windows, which the cache serves: seed 000, chapter 5) and
writes the output (and max pooling's indices); a window of w elements costs
w FLOPs per output. Backward reads the output gradient (and indices) and
writes the whole input gradient.
"""

from __future__ import annotations

from math import prod

from ..tracing import OpEvent
from . import Cost, CostContext, in_bytes, out_bytes, register, tensor_args


def _window(e: OpEvent, x_index: int = 0) -> int:
    for a in e.args[x_index + 1 :]:
        if isinstance(a, (list, tuple)) and a and all(isinstance(v, int) for v in a):
            return prod(a)
    return 1


@register(
    "aten.max_pool2d_with_indices",
    "aten.max_pool3d_with_indices",
    "aten.max_pool2d",
    "aten.max_pool1d",
    "aten.avg_pool2d",
    "aten.avg_pool3d",
    "aten.avg_pool1d",
    "aten.max_pool1d_with_indices",
)
def pool(e: OpEvent, ctx: CostContext) -> Cost:
    out = e.outputs[0]
    return Cost(
        flops=_window(e) * out.numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="pooling",
    )


@register(
    "aten._adaptive_avg_pool2d",
    "aten._adaptive_avg_pool3d",
    "aten.adaptive_max_pool2d",
    "aten.adaptive_max_pool3d",
    "aten.adaptive_avg_pool1d",
    "aten.adaptive_max_pool1d",
)
def adaptive_pool(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0]
    return Cost(
        flops=x.numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="pooling",
    )


@register(
    "aten.max_pool2d_with_indices_backward",
    "aten.max_pool3d_with_indices_backward",
    "aten.avg_pool2d_backward",
    "aten.avg_pool3d_backward",
    "aten._adaptive_avg_pool2d_backward",
    "aten._adaptive_avg_pool3d_backward",
    "aten.adaptive_max_pool2d_backward",
    "aten.adaptive_max_pool3d_backward",
)
def pool_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad = tensor_args(e)[0]
    written = out_bytes(e)
    return Cost(
        flops=grad.numel,
        bytes_read=grad.nbytes + sum(t.nbytes for t in tensor_args(e)[2:] if not t.is_float),
        bytes_written=written,
        category="other",
        family="pooling",
    )


@register(
    "aten.upsample_nearest2d",
    "aten.upsample_bilinear2d",
    "aten.upsample_bicubic2d",
    "aten.upsample_nearest1d",
    "aten.upsample_linear1d",
    "aten.upsample_nearest3d",
    "aten.upsample_trilinear3d",
    "aten._upsample_nearest_exact2d",
    "aten._upsample_bilinear2d_aa",
    "aten.grid_sampler_2d",
)
def upsample(e: OpEvent, ctx: CostContext) -> Cost:
    out = e.outputs[0]
    return Cost(
        flops=4 * out.numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="upsample",
    )


@register(
    "aten.upsample_nearest2d_backward",
    "aten.upsample_bilinear2d_backward",
    "aten.upsample_bicubic2d_backward",
    "aten.upsample_nearest1d_backward",
    "aten.upsample_linear1d_backward",
    "aten.upsample_nearest3d_backward",
    "aten.upsample_trilinear3d_backward",
    "aten._upsample_nearest_exact2d_backward",
    "aten.grid_sampler_2d_backward",
)
def upsample_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad = tensor_args(e)[0]
    return Cost(
        flops=4 * grad.numel,
        bytes_read=grad.nbytes,
        bytes_written=out_bytes(e),
        category="other",
        family="upsample",
    )
