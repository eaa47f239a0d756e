"""Views, allocation, data movement, reductions, indexing, embedding, losses.

Views and metadata ops move nothing and cost nothing. Copies, casts,
concatenation and materialised transposes read their input and write their
output. Reductions read their input once.
"""

from __future__ import annotations

from ..tracing import OpEvent
from . import Cost, CostContext, in_bytes, out_bytes, register, tensor_args

VIEWS = (
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "slice",
    "select",
    "as_strided",
    "alias",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "narrow",
    "diagonal",
    "view_as",
    "unflatten",
    "flatten",
    "movedim",
    "detach",
    "detach_",
    "_to_dense",
    "lift_fresh",
    "numpy_T",
    "mT",
    "unfold",
    "view_as_real",
    "view_as_complex",
    "_conj",
    "conj",
    "resolve_conj",
    "resolve_neg",
    "_neg_view",
    "set_",
    "resize_",
    "as_strided_",
    "squeeze_",
    "unsqueeze_",
    "t_",
    "transpose_",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "_local_scalar_dense",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "scalar_tensor",
    "_assert_async",
    "_assert_tensor_metadata",
    "_functional_assert_async",
    "record_stream",
    "_version",
    "size",
    "stride",
    "dim",
    "is_contiguous",
)


@register(*(f"aten.{name}" for name in VIEWS))
def view(e: OpEvent, ctx: CostContext) -> Cost:
    return Cost(category="view", family="view", kernels=0)


@register(
    "aten._to_copy",
    "aten.copy_",
    "aten.clone",
    "aten.contiguous",
    "aten.copy",
    "aten._copy_from",
    "aten.lift_fresh_copy",
    "aten.to",
    "aten.roll",
    "aten.flip",
    "aten.repeat",
    "aten.tile",
    "aten.pixel_shuffle",
    "aten.pixel_unshuffle",
    "aten.channel_shuffle",
    "aten.constant_pad_nd",
    "aten.reflection_pad2d",
    "aten.replication_pad2d",
    "aten.pad",
    "aten.triu_indices",
    "aten.tril_indices",
    "aten.col2im",
    "aten.im2col",
    "aten.masked_select",
)
def copy(e: OpEvent, ctx: CostContext) -> Cost:
    out = out_bytes(e) or (tensor_args(e)[0].nbytes if tensor_args(e) else 0)
    src = tensor_args(e)[-1] if "copy_" in e.op else (tensor_args(e) or [None])[0]
    return Cost(
        bytes_read=src.nbytes if src else 0, bytes_written=out, category="other", family="movement"
    )


@register("aten.cat", "aten.stack", "aten.hstack", "aten.vstack", "aten.concat")
def cat(e: OpEvent, ctx: CostContext) -> Cost:
    return Cost(
        bytes_read=in_bytes(e), bytes_written=out_bytes(e), category="other", family="movement"
    )


@register(
    "aten.zeros",
    "aten.ones",
    "aten.full",
    "aten.zeros_like",
    "aten.ones_like",
    "aten.full_like",
    "aten.new_zeros",
    "aten.new_ones",
    "aten.new_full",
    "aten.arange",
    "aten.linspace",
    "aten.eye",
    "aten.index_put",
    "aten.index_put_",
    "aten._index_put_impl_",
)
def fill(e: OpEvent, ctx: CostContext) -> Cost:
    read = in_bytes(e) if "index_put" in e.op or "masked" in e.op else 0
    return Cost(bytes_read=read, bytes_written=out_bytes(e), category="other", family="fill")


@register(
    "aten.sum",
    "aten.mean",
    "aten.amax",
    "aten.amin",
    "aten.max",
    "aten.min",
    "aten.argmax",
    "aten.argmin",
    "aten.prod",
    "aten.var",
    "aten.std",
    "aten.var_mean",
    "aten.std_mean",
    "aten.norm",
    "aten.linalg_vector_norm",
    "aten.logsumexp",
    "aten.any",
    "aten.all",
    "aten.cumsum",
    "aten.cumprod",
    "aten.sort",
    "aten.topk",
    "aten.count_nonzero",
    "aten.nansum",
    "aten.aminmax",
    "aten.median",
    "aten.mode",
    "aten.kthvalue",
)
def reduction(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0] if tensor_args(e) else None
    numel = x.numel if x else 0
    return Cost(
        flops=numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="reduction",
    )


@register(
    "aten.index",
    "aten.index_select",
    "aten.gather",
    "aten.take",
    "aten.take_along_dim",
    "aten.embedding",
    "aten._embedding_bag",
    "aten.embedding_bag",
)
def gather(e: OpEvent, ctx: CostContext) -> Cost:
    # reads the indices and only the gathered rows, writes the output
    ts = tensor_args(e)
    index_bytes = sum(t.nbytes for t in ts[1:] if not t.is_float)
    if "embedding" in e.op:
        index_bytes = sum(t.nbytes for t in ts if not t.is_float)
    written = out_bytes(e)
    return Cost(
        bytes_read=index_bytes + written, bytes_written=written, category="other", family="gather"
    )


@register(
    "aten.scatter",
    "aten.scatter_",
    "aten.scatter_add",
    "aten.scatter_add_",
    "aten.scatter_reduce",
    "aten.scatter_reduce_",
    "aten.index_add",
    "aten.index_add_",
    "aten.index_copy",
    "aten.index_copy_",
    "aten.index_fill",
    "aten.index_fill_",
    "aten.embedding_dense_backward",
    "aten.embedding_backward",
    "aten._embedding_bag_backward",
    "aten.select_backward",
    "aten.slice_backward",
    "aten.diagonal_backward",
    "aten.unfold_backward",
    "aten.slice_scatter",
    "aten.select_scatter",
    "aten.diagonal_scatter",
    "aten.as_strided_scatter",
    "aten.masked_scatter_backward",
    "aten.index_select_backward",
)
def scatter(e: OpEvent, ctx: CostContext) -> Cost:
    # writes the whole destination (zero it, then accumulate), reads the sources
    return Cost(
        flops=sum(t.numel for t in tensor_args(e)[:1]),
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="scatter",
    )


@register(
    "aten.nll_loss_forward",
    "aten.nll_loss2d_forward",
    "aten.nll_loss_nd",
    "aten.mse_loss",
    "aten.l1_loss",
    "aten.smooth_l1_loss",
    "aten.huber_loss",
    "aten.binary_cross_entropy",
    "aten.binary_cross_entropy_with_logits",
    "aten.nll_loss_backward",
    "aten.nll_loss2d_backward",
    "aten.mse_loss_backward",
    "aten.smooth_l1_loss_backward",
    "aten.huber_loss_backward",
    "aten.binary_cross_entropy_backward",
    "aten.cross_entropy_loss",
)
def loss(e: OpEvent, ctx: CostContext) -> Cost:
    return Cost(
        flops=2 * sum(t.numel for t in e.outputs),
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        category="other",
        family="loss",
    )
