"""Scaled-dot-product attention as one fused kernel (flash, memory-efficient,
cuDNN, or PyTorch's CPU flash kernel).

The events are dlperf's own `dlperf.attention` / `dlperf.attention_backward`
(what a traced `F.scaled_dot_product_attention` becomes, `tracing.attention`)
and the aten ops of each fused backend (in traces of real runs). q is
(B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev); the lower
`aten._flash_attention_*` / `aten._efficient_attention_*` ops take
(B, L, H, E). FLOPs follow the FlashAttention-2 paper (Dao 2023, sec. 4.1):
forward 2 GEMMs, 4 * B * H * L * S * E, halved under a causal mask;
backward 5 GEMMs (the scores are recomputed), 2.5x the forward. The L x S
score matrix stays on chip: the bytes are q, k, v, the output and its row
log-sum-exp (plus dO, dQ, dK, dV backward, and the mask when one is given);
the dropout RNG seed is a few bytes. Which backend runs, hence the time, is
for the device to say: the cost carries an `AttentionShape` hint that
`pricing` resolves (`kernels.attention`). The explicit "math" form needs no
handler: it reaches the dispatcher as bmm, softmax and element-wise ops.
"""

from __future__ import annotations

import dataclasses

import torch

from ..dtypes import name_of
from ..kernels.attention_backends import REGISTRY
from ..kinds import Category
from ..tracing import OpEvent, TensorMeta
from ..tracing import attention as _traced  # registers the dlperf:: ops  # noqa: F401
from .cost import AttentionShape, Cost, CostContext, noted
from .factories import arguments, in_bytes, out_bytes
from .registry import aten_ops, register

_ATTENTION = {"category": Category.CONTRACTION, "family": "attention"}
# The backends whose kernels the aten ops name (the CPU kernel is a flash kernel too).
_NAMED = tuple(b.name for b in REGISTRY if b.aten)
_OWN = ("dlperf.attention.default", "dlperf.attention_backward.default")


def _backend_named(op: str) -> str:
    return next((backend for backend in _NAMED if backend in op), "")


def attention_shape(e: OpEvent, ctx: CostContext, phase: str) -> AttentionShape:
    """The attention call an event describes (see the module docstring)."""
    a = arguments(e)
    q, k, v = (a[name] if name in a else a[name[0]] for name in ("query", "key", "value"))
    heads_first = e.op.startswith(("aten._scaled", "dlperf."))
    b, hq, lq, d = _bhld(q, heads_first)
    _, hkv, lk, _ = _bhld(k, heads_first)
    mask = next((a[n] for n in ("attn_mask", "attn_bias", "bias") if a.get(n) is not None), None)
    causal = bool(a.get("is_causal")) or bool(a.get("custom_mask_type"))
    own = e.op in _OWN
    return AttentionShape(
        batch=b,
        heads=hq,
        kv_heads=hkv,
        q_len=lq,
        kv_len=lk,
        head_dim=d,
        value_dim=v.shape[3],
        causal=causal,
        dtype=name_of(q.dtype, "fp32"),
        math_dtype=ctx.precision.contraction_dtype(q.dtype),
        mask=_mask_kind(mask),
        dropout=float(a.get("dropout_p") or 0.0),
        phase=phase,
        requested=a["requested"] if own else "auto",
        needs_grad=bool(a.get("needs_grad", True)),
        named="" if own else _backend_named(e.op),
    )


def _bhld(t: TensorMeta, heads_first: bool) -> tuple[int, int, int, int]:
    """(batch, heads, length, size) of a q, k or v tensor."""
    b, x, y, size = t.shape
    return (b, x, y, size) if heads_first else (b, y, x, size)


def _mask_kind(mask) -> str:
    if not isinstance(mask, TensorMeta):
        return ""
    return "bool" if mask.dtype == torch.bool else "float"


def _fused(e: OpEvent, ctx: CostContext, phase: str, remark: str):
    read, written = in_bytes(e), out_bytes(e)
    shape = dataclasses.replace(attention_shape(e, ctx, phase), bytes=read + written)
    cost = Cost(flops=shape.flops, bytes_read=read, bytes_written=written, attention=(shape,))
    return noted(cost, remark)


@register(
    "dlperf.attention.default",
    *aten_ops(
        """
        _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
        _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
        _flash_attention_forward _efficient_attention_forward
        """
    ),
    **_ATTENTION,
)
def sdpa_forward(e: OpEvent, ctx: CostContext):
    return _fused(e, ctx, "forward", "fused attention: no L x S matrix in memory")


@register(
    "dlperf.attention_backward.default",
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
def sdpa_backward(e: OpEvent, ctx: CostContext):
    return _fused(e, ctx, "backward", "fused attention backward: recomputes the scores")
