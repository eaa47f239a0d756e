"""Data movement, reductions, indexing, embedding, losses.

Copies, casts, concatenation and materialised transposes read their input
and write their output. Reductions read their input once. Views and
metadata ops move nothing: the tracer counts them (`tracing.views`), and
they have no handler.
"""

from __future__ import annotations

import torch

from ..kinds import Category
from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext
from .factories import arguments, first, in_bytes, memory_bound, out_bytes, tensor_args
from .registry import aten_ops, register

aten = torch.ops.aten
_OTHER = Category.OTHER


def _copy_source(e: OpEvent) -> int:
    """The tensor a copy reads: the source of an in-place `copy_` (its last), else the first."""
    ts = tensor_args(e)
    src = ts[-1] if "copy_" in e.op else (ts[0] if ts else None)
    return src.nbytes if src else 0


def _copy_written(e: OpEvent) -> int:
    x = first(e)
    return out_bytes(e) or (x.nbytes if x else 0)


register(
    *aten_ops(
        """
        _to_copy copy_ clone contiguous copy _copy_from lift_fresh_copy to roll flip repeat tile
        pixel_shuffle pixel_unshuffle channel_shuffle constant_pad_nd reflection_pad2d
        replication_pad2d pad triu_indices tril_indices col2im im2col masked_select
        """
    ),
    category=_OTHER,
    family="movement",
)(memory_bound(read=_copy_source, written=_copy_written))

register(
    aten.cat, aten.stack, aten.hstack, aten.vstack, aten.concat, category=_OTHER, family="movement"
)(memory_bound())


register(
    *aten_ops(
        """
        zeros ones full zeros_like ones_like full_like new_zeros new_ones new_full arange
        linspace eye
        """
    ),
    category=_OTHER,
    family="fill",
)(memory_bound(read=lambda e: 0))
# writes into the destination from the values and indices it reads
register(aten.index_put, aten.index_put_, aten._index_put_impl_, category=_OTHER, family="fill")(
    memory_bound()
)


def _first_numel(e: OpEvent) -> int:
    x = first(e)
    return x.numel if x else 0


register(
    *aten_ops(
        """
        sum mean amax amin max min argmax argmin prod var std var_mean std_mean norm
        linalg_vector_norm logsumexp any all cumsum cumprod sort topk count_nonzero nansum
        aminmax median mode kthvalue
        """
    ),
    category=_OTHER,
    family="reduction",
)(memory_bound(flops=_first_numel))


def _gathered(e: OpEvent) -> int:
    """A gather reads the indices and only the gathered rows (as many as it writes)."""
    ts = tensor_args(e)
    indices = ts if "embedding" in e.op else ts[1:]
    return sum(t.nbytes for t in indices if not t.is_float) + out_bytes(e)


register(
    *aten_ops(
        """
        index index_select gather take take_along_dim embedding _embedding_bag embedding_bag
        """
    ),
    category=_OTHER,
    family="gather",
)(memory_bound(read=_gathered))


# A scatter writes the whole destination (zero it, then accumulate) and reads the sources.
register(
    *aten_ops(
        """
        scatter scatter_ scatter_add scatter_add_ scatter_reduce scatter_reduce_ index_add
        index_add_ index_copy index_copy_ index_fill index_fill_ embedding_dense_backward
        embedding_backward _embedding_bag_backward select_backward slice_backward
        diagonal_backward unfold_backward slice_scatter select_scatter diagonal_scatter
        as_strided_scatter masked_scatter_backward index_select_backward
        """
    ),
    category=_OTHER,
    family="scatter",
)(memory_bound(flops=_first_numel))


register(
    *aten_ops(
        """
        nll_loss_nd mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy
        binary_cross_entropy_with_logits mse_loss_backward smooth_l1_loss_backward
        huber_loss_backward binary_cross_entropy_backward cross_entropy_loss
        """
    ),
    category=_OTHER,
    family="loss",
)(memory_bound(flops=lambda e: 2 * sum(t.numel for t in e.outputs)))


# The negative log-likelihood of (N, C) log-probabilities (or (N, C, d...) for
# nll_loss2d) at the N (or N x d...) class indices in `target`: one target per
# row, and the kernel touches one element of the row, never the whole row.
# PyTorch's CUDA kernels (aten/src/ATen/native/cuda/Loss.cu, NLLLoss2d.cu) and
# its CPU ones read, per target t_i, the element self[i, t_i] (and weight[t_i]).


def _nll_targets(e: OpEvent) -> tuple[TensorMeta | None, int]:
    """The target tensor and how many elements of `self` the op touches: one a target."""
    target = arguments(e).get("target")
    return (target, target.numel) if isinstance(target, TensorMeta) else (None, 0)


def _nll_weight_read(e: OpEvent, gathered: int) -> int:
    """The class weights a gather of `gathered` targets reads: weight[t_i] per target,
    no more than the whole (C,) vector when targets repeat classes."""
    weight = arguments(e).get("weight")
    if not isinstance(weight, TensorMeta):
        return 0
    return min(gathered, weight.numel) * weight.itemsize


def _nll_forward_read(e: OpEvent) -> int:
    """nll_loss_forward(self, target, weight, ...) reads the targets, one element of
    `self` per target (self[i, t_i]: a gather, not a stream of the C-wide row, which
    would price the Llama-3 head's 4096 x 128256 fp32 log-probabilities at 2.1 GB
    where the kernel reads 16 KB of them) and one weight per target."""
    target, gathered = _nll_targets(e)
    if target is None:
        return in_bytes(e)
    x = arguments(e)["self"]
    return target.nbytes + gathered * x.itemsize + _nll_weight_read(e, gathered)


def _nll_backward_read(e: OpEvent) -> int:
    """nll_loss_backward(grad_output, self, target, weight, ..., total_weight) reads
    grad_output (a scalar under mean/sum, N values under 'none'), the targets, the
    weight per target and total_weight. `self` is an argument for its shape only:
    the gradient is -weight[t_i] * grad_output / total_weight at (i, t_i) and zero
    elsewhere, so the logits are never read."""
    target, gathered = _nll_targets(e)
    if target is None:
        return in_bytes(e)
    a = arguments(e)
    small = [a.get(name) for name in ("grad_output", "total_weight")]
    return (
        sum(t.nbytes for t in small if isinstance(t, TensorMeta))
        + target.nbytes
        + _nll_weight_read(e, gathered)
    )


def _nll_forward(e: OpEvent, ctx: CostContext) -> Cost:
    return Cost(
        flops=2 * sum(t.numel for t in e.outputs),
        bytes_read=_nll_forward_read(e),
        bytes_written=out_bytes(e),
    )


def _nll_backward(e: OpEvent, ctx: CostContext) -> Cost:
    """Two kernels: a fill zeroes all of grad_input (its whole size written), then
    the scatter writes one element a target (grad_input[i, t_i]). On the H100 the
    Llama-3 head's 4096 x 128256 fp32 gradient took 635 us to fill and 11 us to
    scatter (bench/measured/h100-2026-11-28); reading the logits too priced it at
    twice the fill."""
    _, gathered = _nll_targets(e)
    grad_input = e.outputs[0] if e.outputs else None
    scattered = gathered * grad_input.itemsize if grad_input else 0
    return Cost(
        flops=2 * sum(t.numel for t in e.outputs),
        bytes_read=_nll_backward_read(e),
        bytes_written=out_bytes(e) + scattered,
        kernels=2,
    )


register(aten.nll_loss_forward, aten.nll_loss2d_forward, category=_OTHER, family="loss")(
    _nll_forward
)
register(aten.nll_loss_backward, aten.nll_loss2d_backward, category=_OTHER, family="loss")(
    _nll_backward
)
