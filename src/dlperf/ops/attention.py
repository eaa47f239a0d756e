"""Scaled-dot-product attention in its fused forms (flash, memory-efficient,
cuDNN, and PyTorch's CPU flash kernel).

q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev). Forward: Q K^T
(L x S x E) then P V (L x Ev x S) per batch and head. Backward recomputes
Q K^T, then dV, dP, dQ and dK: five GEMMs, as torch.utils.flop_counter
counts them. Fused kernels keep the L x S score matrix on chip: bytes are
q, k, v, the output (and its gradients) and the row statistics. The
explicit "math" form needs no handler: it reaches the dispatcher as bmm,
softmax and elementwise ops, whose score matrices do go through memory.
"""

from __future__ import annotations

from ..precision import DTYPE_NAMES
from ..tracing import OpEvent, TensorMeta
from . import Cost, CostContext, Gemm, in_bytes, out_bytes, register

# Softmax arithmetic per score element (max, subtract, exp, sum, scale).
SOFTMAX_FLOPS = 5


def _dims(e: OpEvent, q: TensorMeta, k: TensorMeta, v: TensorMeta):
    """(batch x heads, query length, key length, head size, value head size).

    The `aten._scaled_dot_product_*` ops take (B, H, L, E) tensors; the lower
    `aten._flash_attention_*` / `aten._efficient_attention_*` ops (B, L, H, E).
    """
    if e.op.startswith("aten._scaled"):
        b, h, lq, d = q.shape
        return b * h, lq, k.shape[2], d, v.shape[3]
    b, lq, h, d = q.shape
    return b * h, lq, k.shape[1], d, v.shape[3]


def _gemm(ctx, q: TensorMeta, m, n, k, batch, role):
    return Gemm(
        m,
        n,
        k,
        batch=batch,
        dtype=ctx.precision.contraction_dtype(q.dtype),
        storage=DTYPE_NAMES.get(q.dtype, "fp32"),
        role=role,
    )


@register(
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention",
    "aten._flash_attention_forward",
    "aten._efficient_attention_forward",
)
def sdpa_forward(e: OpEvent, ctx: CostContext) -> Cost:
    q, k, v = e.args[:3]
    bh, lq, s, d, dv = _dims(e, q, k, v)
    gemms = (_gemm(ctx, q, lq, s, d, bh, "scores"), _gemm(ctx, q, lq, dv, s, bh, "context"))
    flops = sum(g.flops for g in gemms) + SOFTMAX_FLOPS * bh * lq * s
    return Cost(
        flops=flops,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="contraction",
        family="attention",
        gemms=gemms,
        notes=("fused attention: no L x S matrix in memory",),
    )


@register(
    "aten._scaled_dot_product_flash_attention_backward",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward",
    "aten._scaled_dot_product_efficient_attention_backward",
    "aten._scaled_dot_product_cudnn_attention_backward",
    "aten._flash_attention_backward",
    "aten._efficient_attention_backward",
)
def sdpa_backward(e: OpEvent, ctx: CostContext) -> Cost:
    q, k, v = e.args[1:4]  # after the output gradient
    bh, lq, s, d, dv = _dims(e, q, k, v)
    gemms = (
        _gemm(ctx, q, lq, s, d, bh, "recompute scores"),
        _gemm(ctx, q, lq, s, dv, bh, "grad probabilities"),
        _gemm(ctx, q, s, dv, lq, bh, "grad v"),
        _gemm(ctx, q, lq, d, s, bh, "grad q"),
        _gemm(ctx, q, s, d, lq, bh, "grad k"),
    )
    flops = sum(g.flops for g in gemms) + 2 * SOFTMAX_FLOPS * bh * lq * s
    return Cost(
        flops=flops,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="contraction",
        family="attention",
        gemms=gemms,
        notes=("fused attention backward: recomputes the scores",),
    )
