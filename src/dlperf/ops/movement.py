"""Data movement, reductions, indexing, embedding, losses.

Copies, casts, concatenation and materialised transposes read their input
and write their output. Reductions read their input once. Views and
metadata ops move nothing: the tracer counts them (`tracing.views`), and
they have no handler.
"""

from __future__ import annotations

import torch

from ..kinds import Category
from ..tracing import OpEvent
from .factories import first, memory_bound, out_bytes, tensor_args
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
        nll_loss_forward nll_loss2d_forward nll_loss_nd mse_loss l1_loss smooth_l1_loss
        huber_loss binary_cross_entropy binary_cross_entropy_with_logits nll_loss_backward
        nll_loss2d_backward mse_loss_backward smooth_l1_loss_backward huber_loss_backward
        binary_cross_entropy_backward cross_entropy_loss
        """
    ),
    category=_OTHER,
    family="loss",
)(memory_bound(flops=lambda e: 2 * sum(t.numel for t in e.outputs)))
