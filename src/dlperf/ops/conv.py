"""Convolutions as implicit GEMMs, forward and backward.

Forward: M = N x P x Q (output pixels), N = K (output channels per group),
K = C x R x S (input channels per group x filter taps), one GEMM per group.
Data gradient: M = N x P x Q, N = C, K = K x R x S (cuDNN's scatter form:
one row per output pixel, so the FLOPs equal the forward's). Weight
gradient: M = K, N = C x R x S, K = N x P x Q. Transposed convolutions swap
the roles of input and output.

Tensor Core convolutions run on NHWC data: an NCHW tensor in a Tensor Core
dtype is transposed on the way in and out, which costs one extra read and
write of the input and the output (seed 002/003, "Convolutions").
"""

from __future__ import annotations

from math import prod

from ..precision import DTYPE_NAMES
from ..tracing import OpEvent, TensorMeta
from . import Cost, CostContext, Gemm, register


def _dims(x: TensorMeta, w: TensorMeta, out: TensorMeta, transposed: bool, groups: int):
    """(batch, in-pixels, out-pixels, C/g, K/g, taps) of a convolution."""
    n = x.shape[0]
    taps = prod(w.shape[2:])
    if transposed:  # weight (C, K/g, ...): the data gradient of a convolution from out to x
        c_g, k_g = w.shape[0] // groups, w.shape[1]
    else:  # weight (K, C/g, ...)
        k_g, c_g = w.shape[0] // groups, w.shape[1]
    return n, prod(x.shape[2:]), prod(out.shape[2:]), c_g, k_g, taps


def _layout_cost(ctx: CostContext, math_dtype: str, tensors: list[TensorMeta]) -> tuple[int, tuple]:
    """Extra bytes when NCHW data feeds a Tensor Core convolution."""
    if not ctx.spec.has_dtype(math_dtype) or not ctx.spec.uses_tensor_cores(math_dtype):
        return 0, ()
    if any(len(t.shape) != 4 or t.channels_last for t in tensors[:1]):
        return 0, ()
    extra = 2 * sum(t.nbytes for t in tensors)
    return extra, ("NCHW: Tensor Core kernels transpose to NHWC",)


def _gemm(ctx, x: TensorMeta, m, n, k, groups, role, tensor_bytes) -> Gemm:
    return Gemm(
        m,
        n,
        k,
        batch=groups,
        dtype=ctx.precision.contraction_dtype(x.dtype),
        storage=DTYPE_NAMES.get(x.dtype, "fp32"),
        role=role,
        tensor_bytes=tensor_bytes,
    )


# Channels per group at or below which a grouped convolution is no GEMM at all:
# depthwise kernels stream the tensor once, memory-bound (seed 002, hierarchical models).
DEPTHWISE_MAX_CHANNELS = 4


def _depthwise(groups: int, c_g: int, k_g: int) -> bool:
    return groups > 1 and c_g <= DEPTHWISE_MAX_CHANNELS and k_g <= DEPTHWISE_MAX_CHANNELS


def _depthwise_cost(e: OpEvent, read: list[TensorMeta], written: list[TensorMeta], flops) -> Cost:
    return Cost(
        flops=flops,
        bytes_read=sum(t.nbytes for t in read),
        bytes_written=sum(t.nbytes for t in written),
        category="contraction",
        family="conv-depthwise",
        notes=("depthwise: memory-bound, no GEMM",),
    )


@register(
    "aten.convolution",
    "aten._convolution",
    "aten.cudnn_convolution",
    "aten.mkldnn_convolution",
    "aten.convolution_overrideable",
)
def convolution(e: OpEvent, ctx: CostContext) -> Cost:
    x, w = e.args[0], e.args[1]
    bias = e.args[2] if len(e.args) > 2 and isinstance(e.args[2], TensorMeta) else None
    transposed = bool(e.args[6]) if len(e.args) > 6 and isinstance(e.args[6], bool) else False
    groups = int(e.args[8]) if len(e.args) > 8 and isinstance(e.args[8], int) else 1
    out = e.outputs[0]
    n, in_px, out_px, c_g, k_g, taps = _dims(x, w, out, transposed, groups)
    if _depthwise(groups, c_g, k_g):
        return _depthwise_cost(e, [x, w], [out], n * out_px * c_g * k_g * taps * groups * 2)
    read = x.nbytes + w.nbytes + (bias.nbytes if bias else 0)
    moved = read + out.nbytes
    if transposed:
        g = _gemm(ctx, x, n * in_px, k_g * taps, c_g, groups, "fprop", moved)
    else:
        g = _gemm(ctx, x, n * out_px, k_g, c_g * taps, groups, "fprop", moved)
    extra, notes = _layout_cost(ctx, g.dtype, [x, out])
    return Cost(
        flops=g.flops,
        bytes_read=read + extra / 2,
        bytes_written=out.nbytes + extra / 2,
        category="contraction",
        family="conv",
        gemms=(g,),
        notes=notes,
    )


@register("aten.convolution_backward")
def convolution_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad_out, x, w = e.args[0], e.args[1], e.args[2]
    # (grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #  output_padding, groups, output_mask)
    transposed = bool(e.args[7])
    groups = int(e.args[9])
    mask = e.args[10] if len(e.args) > 10 else [True, True, True]
    n, in_px, out_px, c_g, k_g, taps = _dims(x, w, grad_out, transposed, groups)
    if _depthwise(groups, c_g, k_g):
        flops = sum(mask[:2]) * n * out_px * c_g * k_g * taps * groups * 2
        return _depthwise_cost(e, [grad_out, x, w], list(e.outputs), flops)
    gemms, read, written = [], 0, 0
    if mask[0]:  # data gradient
        moved = grad_out.nbytes + w.nbytes + x.nbytes
        rows = n * (in_px if transposed else out_px)
        gemms.append(_gemm(ctx, x, rows, c_g, k_g * taps, groups, "dgrad", moved))
        read += grad_out.nbytes + w.nbytes
        written += x.nbytes
    if mask[1]:  # weight gradient
        pixels = n * (in_px if transposed else out_px)
        moved = grad_out.nbytes + x.nbytes + w.nbytes
        gemms.append(_gemm(ctx, x, k_g, c_g * taps, pixels, groups, "wgrad", moved))
        read += grad_out.nbytes + x.nbytes
        written += w.nbytes
    flops = sum(g.flops for g in gemms)
    if len(mask) > 2 and mask[2]:  # bias gradient: a reduction of grad_out
        read += grad_out.nbytes
        flops += grad_out.numel
    extra, notes = _layout_cost(ctx, gemms[0].dtype if gemms else "fp32", [grad_out, x])
    return Cost(
        flops=flops,
        bytes_read=read + extra / 2,
        bytes_written=written + extra / 2,
        category="contraction",
        family="conv",
        gemms=tuple(gemms),
        kernels=max(1, len(gemms)),
        notes=notes,
    )
