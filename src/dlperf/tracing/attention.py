"""Scaled-dot-product attention traced as the GPU runs it.

On fake CPU tensors `F.scaled_dot_product_attention` takes PyTorch's CPU path:
with dropout (training) its math decomposition, upcast to fp32 even under
autocast, with an L x S score matrix through memory. A CUDA device runs one
fused kernel (FlashAttention, memory-efficient or cuDNN) in the inputs' half
precision. While tracing, `fused_attention` replaces each SDPA call by the
custom op `dlperf::attention` (and its backward by `dlperf::attention_backward`):
one event per call and phase, which `ops/attention.py` costs and `pricing`
times for the backend the target device would choose (`kernels.attention`).
The op's autograd saves what the flash kernel saves (q, k, v, the output and
the row log-sum-exp), so activation memory follows the kernel through the
recorder's saved-tensor hooks. For "math", `math_decomposition` runs SDPA's
math backend as CUDA does, in the inputs' dtype.

Neither is active outside tracing: `measure` runs the real model.
"""

from __future__ import annotations

import contextlib
import math
import sys

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..kernels.attention_backends import FUSED

# The backends a user may ask for that run through the fused op.
FUSED_REQUESTS = ("auto", *FUSED)
_SDPA = F.scaled_dot_product_attention


@torch.library.custom_op("dlperf::attention", mutates_args=())
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    requested: str,
    needs_grad: bool,
) -> tuple[Tensor, Tensor]:
    """(output, row log-sum-exp in fp32) of attention; a reference on real
    tensors (dlperf only ever runs it on fake ones)."""
    if dropout_p:
        raise NotImplementedError("dlperf::attention has no real dropout; it is traced only")
    scores = _scores(q, k, attn_mask, is_causal, scale, enable_gqa)
    out = torch.softmax(scores, dim=-1).to(v.dtype) @ _expand(v, q.shape[1], enable_gqa)
    return _flash_layout(out), torch.logsumexp(scores, dim=-1)


@attention.register_fake
def _(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, requested, needs_grad):
    _check_shapes(q, k, v)
    b, h, lq, _ = q.shape
    out = q.new_empty((b, lq, h, v.shape[-1])).transpose(1, 2)
    return out, q.new_empty((b, h, lq), dtype=torch.float32)


@torch.library.custom_op("dlperf::attention_backward", mutates_args=())
def attention_backward(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    requested: str,
    mask_grad: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, dmask): dmask is empty unless `mask_grad` (a learned bias,
    which the memory-efficient kernel differentiates); a reference on real
    tensors, like `attention` (autograd does not run inside an op: by hand)."""
    if dropout_p:
        raise NotImplementedError("dlperf::attention_backward has no real dropout")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    heads = q.shape[1]
    probs = torch.softmax(_scores(q, k, attn_mask, is_causal, scale, enable_gqa), dim=-1)
    keys, values = (_expand(t, heads, enable_gqa).float() for t in (k, v))
    grad = grad_out.float()
    grad_values = probs.transpose(-2, -1) @ grad
    grad_probs = grad @ values.transpose(-2, -1)
    grad_scores = probs * (grad_probs - (grad_probs * probs).sum(-1, keepdim=True))
    dq = (grad_scores @ keys) * scale
    dk = (grad_scores.transpose(-2, -1) @ q.float()) * scale
    dk, dv = (_grouped_sum(t, k.shape[1]) for t in (dk, grad_values))
    dmask = _reduced_to(grad_scores, attn_mask) if mask_grad else q.new_empty(0)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dmask


def _grouped_sum(grad: Tensor, kv_heads: int) -> Tensor:
    """A key or value gradient over the query heads, summed back to the key heads."""
    b, h, length, size = grad.shape
    return grad.reshape(b, kv_heads, h // kv_heads, length, size).sum(2)


def _reduced_to(grad: Tensor, like: Tensor) -> Tensor:
    """`grad` summed over the dimensions `like` broadcasts, in its dtype."""
    dims = [i for i, n in enumerate(like.shape) if n == 1 and grad.shape[i] != 1]
    return (grad.sum(dims, keepdim=True) if dims else grad).to(like.dtype)


@attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, attn_mask, dropout_p, is_causal, scale, enable_gqa, requested,
      mask_grad):  # fmt: skip
    dmask = torch.empty_like(attn_mask) if mask_grad else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dmask


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, requested, _ = inputs
    out, lse = output
    # What the flash kernel keeps for backward (its RNG seed aside): no L x S matrix.
    saved = (q, k, v, out, lse) if attn_mask is None else (q, k, v, out, lse, attn_mask)
    ctx.save_for_backward(*saved)
    # the log-sum-exp has no gradient: autograd makes no zeros for it
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)
    ctx.config = (dropout_p, is_causal, scale, enable_gqa, requested)
    ctx.mask_grad = attn_mask is not None and attn_mask.requires_grad


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse, *mask = ctx.saved_tensors
    attn_mask = mask[0] if mask else None
    config = (*ctx.config, ctx.mask_grad)
    dq, dk, dv, dmask = attention_backward(grad_out, q, k, v, out, lse, attn_mask, *config)
    return dq, dk, dv, dmask if ctx.mask_grad else None, None, None, None, None, None, None


attention.register_autograd(_backward, setup_context=_setup_context)


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    if not (q.dim() == k.dim() == v.dim() == 4):
        raise ValueError("dlperf::attention takes 4-D (batch, heads, length, head size) tensors")
    if q.shape[1] % k.shape[1] or k.shape[1] != v.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} are no multiple of key heads {k.shape[1]}")


def _flash_layout(out: Tensor) -> Tensor:
    """`out` stored as (batch, length, heads, size), as the flash kernel writes it:
    the usual transpose back to (batch, length, hidden) then moves nothing."""
    return out.transpose(1, 2).contiguous().transpose(1, 2)


def _expand(t: Tensor, heads: int, enable_gqa: bool) -> Tensor:
    """Key or value heads repeated to the query's (grouped-query attention)."""
    if enable_gqa and t.shape[-3] != heads:
        return t.repeat_interleave(heads // t.shape[-3], dim=-3)
    return t


def _scores(q, k, attn_mask, is_causal, scale, enable_gqa) -> Tensor:
    """Scaled scores Q K^T plus the mask (causal or given), in fp32."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    keys = _expand(k, q.shape[-3], enable_gqa)
    scores = (q.float() @ keys.float().transpose(-2, -1)) * scale
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    return scores


def math_decomposition(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False) -> Tensor:  # fmt: skip
    """SDPA as PyTorch's math backend runs it on CUDA: in the inputs' dtype
    (the CPU kernel upcasts half precision to fp32; CUDA does not)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    root = math.sqrt(scale)  # both operands scaled, as the math kernel does
    keys = _expand(k, q.shape[-3], enable_gqa)
    values = _expand(v, q.shape[-3], enable_gqa)
    scores = (q * root) @ (keys * root).transpose(-2, -1)
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        attn_mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(
                ~attn_mask, float("-inf")
            )
        scores = scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p, training=True)
    return probs @ values


class _AttentionMode(TorchFunctionMode):
    """Replaces `F.scaled_dot_product_attention` calls (see the module docstring)."""

    def __init__(self, requested: str, autocast_dtype: torch.dtype | None):
        super().__init__()
        self.requested = requested
        self.autocast_dtype = autocast_dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not _SDPA:
            return func(*args, **kwargs)
        call = _bind(*args, **kwargs)
        q, k, v, mask = (self._cast(t) for t in call[:4])
        config = call[4:]
        # what the CUDA autocast region ran, SDPA computes outside it
        with torch.autocast("cpu", enabled=False):
            if self.requested == "math" or q.dim() != 4:
                return math_decomposition(q, k, v, mask, *config)
            needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out, _ = attention(q, k, v, mask, *config, self.requested, needs_grad)
            return out

    def _cast(self, t):
        """SDPA is on CUDA autocast's lower-precision list: floating inputs
        (a float mask too) are cast to the autocast dtype."""
        casting = self.autocast_dtype is not None and torch.is_autocast_enabled("cpu")
        if casting and isinstance(t, Tensor) and t.is_floating_point():
            return t.to(self.autocast_dtype)
        return t


def _bind(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):  # fmt: skip
    """SDPA's arguments in order, whichever way they were passed."""
    return query, key, value, attn_mask, float(dropout_p), bool(is_causal), scale, bool(enable_gqa)


@contextlib.contextmanager
def fused_attention(requested: str, autocast_dtype: torch.dtype | None):
    """While tracing: SDPA calls become the fused op (`requested` one of
    FUSED_REQUESTS) or, for "math", the math decomposition in the inputs' dtype."""
    with _positions_unpacked(), _AttentionMode(requested, autocast_dtype):
        yield


@contextlib.contextmanager
def _positions_unpacked():
    """Tell transformers that the traced sequences are not packed.

    A causal LM without an attention mask checks its position ids for packed
    sequences; on fake tensors it cannot read them, assumes packing and builds
    an explicit L x S mask, which no flash kernel takes. dlperf's inputs never
    pack sequences (the model numbers positions 0..L-1), so on a GPU
    transformers passes no mask and `is_causal=True`: so it does here.
    """
    masking = sys.modules.get("transformers.masking_utils")
    found = getattr(masking, "find_packed_sequence_indices", None)
    if found is None:
        yield
        return
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking.find_packed_sequence_indices = found
