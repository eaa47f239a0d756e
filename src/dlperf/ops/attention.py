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

import torch

from ..kinds import Category
from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, noted
from .factories import contraction, in_bytes, make_gemm, out_bytes
from .registry import aten_ops, register

aten = torch.ops.aten
_ATTENTION = {"category": Category.CONTRACTION, "family": "attention"}
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


def _fused(e: OpEvent, gemms, softmax_passes: int, remark: str) -> Cost:
    bh, lq, s = gemms[0].batch, gemms[0].m, gemms[0].n  # the scores GEMM: L x S per head
    softmax = softmax_passes * SOFTMAX_FLOPS * bh * lq * s
    return noted(contraction(gemms, in_bytes(e), out_bytes(e), extra_flops=softmax), remark)


@register(
    *aten_ops(
        """
        _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
        _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
        _flash_attention_forward _efficient_attention_forward
        """
    ),
    **_ATTENTION,
)
def sdpa_forward(e: OpEvent, ctx: CostContext) -> Cost:
    q, k, v = e.args[:3]
    bh, lq, s, d, dv = _dims(e, q, k, v)
    gemms = (
        make_gemm(ctx, q.dtype, lq, s, d, bh, role="scores"),
        make_gemm(ctx, q.dtype, lq, dv, s, bh, role="context"),
    )
    return _fused(e, gemms, 1, "fused attention: no L x S matrix in memory")


@register(
    *aten_ops(
        """
        _scaled_dot_product_flash_attention_backward
        _scaled_dot_product_flash_attention_for_cpu_backward
        _scaled_dot_product_efficient_attention_backward
        _scaled_dot_product_cudnn_attention_backward _flash_attention_backward
        _efficient_attention_backward
        """
    ),
    **_ATTENTION,
)
def sdpa_backward(e: OpEvent, ctx: CostContext) -> Cost:
    q, k, v = e.args[1:4]  # after the output gradient
    bh, lq, s, d, dv = _dims(e, q, k, v)
    shapes = (
        (lq, s, d, "recompute scores"),
        (lq, s, dv, "grad probabilities"),
        (s, dv, lq, "grad v"),
        (lq, d, s, "grad q"),
        (s, d, lq, "grad k"),
    )
    gemms = tuple(make_gemm(ctx, q.dtype, m, n, kk, bh, role=r) for m, n, kk, r in shapes)
    return _fused(e, gemms, 2, "fused attention backward: recomputes the scores")
