"""Convolutions as implicit GEMMs, forward and backward.

Forward: M = N x P x Q (output pixels), N = K (output channels per group),
K = C x R x S (input channels per group x filter taps), one GEMM per group.
Data gradient: M = N x P x Q, N = C, K = K x R x S (cuDNN's scatter form:
one row per output pixel, so the FLOPs equal the forward's). Weight
gradient: M = K, N = C x R x S, K = N x P x Q. Transposed convolutions swap
the roles of input and output.

Tensor Core convolutions run on NHWC data: an NCHW tensor in a Tensor Core
dtype is transposed on the way in and out, which costs one extra read and
write of the input and the output (seed 002/003, "Convolutions"). The
handlers give those bytes as a hint; the pricing applies them where the
device runs the math on Tensor Cores.

Under an int8 or fp8 inference policy a forward convolution runs as a
quantized GEMM with its input's quantize kernel (`quantized`), which writes
the input in NHWC as it quantizes it: of the layout hint, the output's
transpose is left.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

import torch

from ..kinds import Category
from ..tracing import OpEvent, TensorMeta
from . import quantized
from .cost import Cost, CostContext, Costed, noted
from .factories import contraction, make_gemm
from .registry import aten_ops, register

aten = torch.ops.aten
_CONV = {"category": Category.CONTRACTION, "family": "conv"}


def _dims(x: TensorMeta, w: TensorMeta, out: TensorMeta, transposed: bool, groups: int):
    """(batch, in-pixels, out-pixels, C/g, K/g, taps) of a convolution."""
    n = x.shape[0]
    taps = prod(w.shape[2:])
    if transposed:  # weight (C, K/g, ...): the data gradient of a convolution from out to x
        c_g, k_g = w.shape[0] // groups, w.shape[1]
    else:  # weight (K, C/g, ...)
        k_g, c_g = w.shape[0] // groups, w.shape[1]
    return n, prod(x.shape[2:]), prod(out.shape[2:]), c_g, k_g, taps


def _transpose_bytes(tensors: list[TensorMeta]) -> int:
    """NCHW data a Tensor Core kernel would transpose to NHWC on the way in and
    out: one extra read and write of each tensor (whether the device runs the
    math on Tensor Cores is for the pricing to say)."""
    if any(len(t.shape) != 4 or t.channels_last for t in tensors[:1]):
        return 0
    return 2 * sum(t.nbytes for t in tensors)


# Channels per group at or below which a grouped convolution is no GEMM at all:
# depthwise kernels stream the tensor once, memory-bound (seed 002, hierarchical models).
DEPTHWISE_MAX_CHANNELS = 4


def _depthwise(groups: int, c_g: int, k_g: int) -> bool:
    return groups > 1 and c_g <= DEPTHWISE_MAX_CHANNELS and k_g <= DEPTHWISE_MAX_CHANNELS


def _depthwise_cost(read: list[TensorMeta], written: list[TensorMeta], flops) -> Costed:
    cost = Cost(
        flops=flops,
        bytes_read=sum(t.nbytes for t in read),
        bytes_written=sum(t.nbytes for t in written),
    )
    return noted(cost, "depthwise: memory-bound, no GEMM", family="conv-depthwise")


@register(
    *aten_ops(
        """
        convolution _convolution cudnn_convolution mkldnn_convolution convolution_overrideable
        """
    ),
    **_CONV,
)
def convolution(e: OpEvent, ctx: CostContext) -> Cost | Costed:
    x, w = e.args[0], e.args[1]
    bias = e.args[2] if len(e.args) > 2 and isinstance(e.args[2], TensorMeta) else None
    transposed = bool(e.args[6]) if len(e.args) > 6 and isinstance(e.args[6], bool) else False
    groups = int(e.args[8]) if len(e.args) > 8 and isinstance(e.args[8], int) else 1
    out = e.outputs[0]
    n, in_px, out_px, c_g, k_g, taps = _dims(x, w, out, transposed, groups)
    if _depthwise(groups, c_g, k_g):
        return _depthwise_cost([x, w], [out], n * out_px * c_g * k_g * taps * groups * 2)
    read = x.nbytes + w.nbytes + (bias.nbytes if bias else 0)
    moved = read + out.nbytes
    if transposed:
        m, cols, k = n * in_px, k_g * taps, c_g
    else:
        m, cols, k = n * out_px, k_g, c_g * taps
    g = make_gemm(
        ctx, x.dtype, m, cols, k, groups, role="fprop", tensor_bytes=moved, conv_reduction=k
    )
    layout = _transpose_bytes([x, out])
    dtype = quantized.gemm_dtype(ctx, x, w)
    if dtype:
        found = quantized.quantized_cost(
            replace(g, dtype=dtype), x, w, out, bias.nbytes if bias else 0
        )
        # The quantize kernel writes the input in the layout the kernel takes: only
        # the output's transpose is left.
        layout = 2 * out.nbytes if layout else 0
        return found._replace(cost=replace(found.cost, layout_transpose_bytes=layout))
    return contraction([g], read, out.nbytes, layout_transpose_bytes=layout)


@register(aten.convolution_backward, **_CONV)
def convolution_backward(e: OpEvent, ctx: CostContext) -> Cost | Costed:
    grad_out, x, w = e.args[0], e.args[1], e.args[2]
    # (grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #  output_padding, groups, output_mask)
    transposed = bool(e.args[7])
    groups = int(e.args[9])
    mask = e.args[10] if len(e.args) > 10 else [True, True, True]
    n, in_px, out_px, c_g, k_g, taps = _dims(x, w, grad_out, transposed, groups)
    if _depthwise(groups, c_g, k_g):
        flops = sum(mask[:2]) * n * out_px * c_g * k_g * taps * groups * 2
        return _depthwise_cost([grad_out, x, w], list(e.outputs), flops)
    gemms, read, written = [], 0, 0
    pixels = n * (in_px if transposed else out_px)
    moved = grad_out.nbytes + w.nbytes + x.nbytes
    if mask[0]:  # data gradient: reads grad_out and w, writes dx
        dgrad = make_gemm(
            ctx, x.dtype, pixels, c_g, k_g * taps, groups, role="dgrad", tensor_bytes=moved,
            conv_reduction=k_g * taps,
        )  # fmt: skip
        gemms.append(dgrad)
        read += grad_out.nbytes + w.nbytes
        written += x.nbytes
    if mask[1]:  # weight gradient: reads grad_out and x, writes dw
        wgrad = make_gemm(
            ctx, x.dtype, k_g, c_g * taps, pixels, groups, role="wgrad", tensor_bytes=moved,
            conv_reduction=c_g * taps,
        )  # fmt: skip
        gemms.append(wgrad)
        read += grad_out.nbytes + x.nbytes
        written += w.nbytes
    bias = grad_out.nbytes if len(mask) > 2 and mask[2] else 0  # a reduction of grad_out
    return contraction(
        gemms,
        read + bias,
        written,
        extra_flops=grad_out.numel if bias else 0,
        kernels=max(1, len(gemms)),
        side_bytes=bias,
        layout_transpose_bytes=_transpose_bytes([grad_out, x]),
    )
