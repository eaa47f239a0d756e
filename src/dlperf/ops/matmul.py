"""Matrix products: mm, addmm, bmm, baddbmm and matrix-vector forms.

`linear`, `matmul` and `einsum` reach the dispatcher already decomposed into
these (plus views), so they need no handler of their own. Under `--precision
fp8` a linear layer's mm and addmm run in fp8 with their casts (`float8`);
under an int8 or fp8 inference policy as quantized GEMMs (`quantized`).
"""

from __future__ import annotations

import torch

from ..kinds import Category
from ..tracing import OpEvent, TensorMeta
from . import float8, quantized, sparse
from .cost import Cost, CostContext, Costed
from .factories import contraction, in_bytes, make_gemm, out_bytes
from .registry import register

aten = torch.ops.aten
_MATMUL = {"category": Category.CONTRACTION, "family": "matmul"}


def _product(ctx: CostContext, e: OpEvent, a: TensorMeta, m, n, k, batch, read) -> Cost:
    return contraction([make_gemm(ctx, a.dtype, m, n, k, batch)], read, out_bytes(e))


def _linear_gemm(
    e: OpEvent, ctx: CostContext, a: TensorMeta, b: TensorMeta, bias_bytes: int = 0
) -> Cost | Costed:
    """A linear layer's GEMM, Y = X W^T (+ bias), as the run's policy has it
    run: 2:4 sparse, fp8 with its casts, quantized, else dense."""
    if sparse.runs_sparse(e, ctx):
        return sparse.linear_gemm(e, ctx, bias_bytes=bias_bytes)
    if float8.runs_fp8(e, ctx):
        return float8.linear_gemm(e, bias_bytes, ctx.precision.linear_format)
    if dtype := quantized.linear_dtype(e, ctx):
        return quantized.linear_gemm(e, dtype, bias_bytes=bias_bytes)
    (m, k), n = a.shape, b.shape[1]
    return _product(ctx, e, a, m, n, k, 1, a.nbytes + b.nbytes + bias_bytes)


@register(aten.mm, **_MATMUL)
def mm(e: OpEvent, ctx: CostContext) -> Cost | Costed:
    return _linear_gemm(e, ctx, e.args[0], e.args[1])


@register(aten.addmm, aten.addmm_, **_MATMUL)
def addmm(e: OpEvent, ctx: CostContext) -> Cost | Costed:
    # The bias is added in the GEMM's epilogue: read once, no extra pass (in
    # place, addmm_, it is the accumulator: read and written over).
    bias, a, b = e.args[0], e.args[1], e.args[2]
    return _linear_gemm(e, ctx, a, b, bias_bytes=bias.nbytes)


@register(aten.bmm, **_MATMUL)
def bmm(e: OpEvent, ctx: CostContext) -> Cost:
    a, b = e.args[0], e.args[1]
    batch, m, k = a.shape
    return _product(ctx, e, a, m, b.shape[2], k, batch, a.nbytes + b.nbytes)


@register(aten.baddbmm, aten.baddbmm_, **_MATMUL)
def baddbmm(e: OpEvent, ctx: CostContext) -> Cost:
    c, a, b = e.args[0], e.args[1], e.args[2]
    batch, m, k = a.shape
    return _product(ctx, e, a, m, b.shape[2], k, batch, a.nbytes + b.nbytes + c.nbytes)


@register(aten.mv, aten.addmv, **_MATMUL)
def mv(e: OpEvent, ctx: CostContext) -> Cost:
    a = next(t for t in e.args if isinstance(t, TensorMeta) and len(t.shape) == 2)
    m, k = a.shape
    return _product(ctx, e, a, m, 1, k, 1, in_bytes(e))


@register(aten.dot, aten.vdot, **_MATMUL)
def dot(e: OpEvent, ctx: CostContext) -> Cost:
    a = e.args[0]
    return _product(ctx, e, a, 1, 1, a.shape[0], 1, in_bytes(e))
