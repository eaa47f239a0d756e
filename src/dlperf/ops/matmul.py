"""Matrix products: mm, addmm, bmm, baddbmm and matrix-vector forms.

`linear`, `matmul` and `einsum` reach the dispatcher already decomposed into
these (plus views), so they need no handler of their own.
"""

from __future__ import annotations

from ..precision import DTYPE_NAMES
from ..tracing import OpEvent, TensorMeta
from . import Cost, CostContext, Gemm, out_bytes, register


def gemm_cost(
    ctx: CostContext,
    a: TensorMeta,
    m: int,
    n: int,
    k: int,
    batch: int,
    read: int,
    written: int,
    role: str = "",
) -> Cost:
    storage = DTYPE_NAMES.get(a.dtype, "fp32")
    g = Gemm(
        m,
        n,
        k,
        batch=batch,
        dtype=ctx.precision.contraction_dtype(a.dtype),
        storage=storage,
        role=role,
    )
    return Cost(
        flops=g.flops,
        bytes_read=read,
        bytes_written=written,
        category="contraction",
        family="matmul",
        gemms=(g,),
    )


@register("aten.mm")
def mm(e: OpEvent, ctx: CostContext) -> Cost:
    a, b = e.args[0], e.args[1]
    (m, k), n = a.shape, b.shape[1]
    return gemm_cost(ctx, a, m, n, k, 1, a.nbytes + b.nbytes, out_bytes(e))


@register("aten.addmm")
def addmm(e: OpEvent, ctx: CostContext) -> Cost:
    bias, a, b = e.args[0], e.args[1], e.args[2]
    (m, k), n = a.shape, b.shape[1]
    # The bias is added in the GEMM's epilogue: read once, no extra pass.
    return gemm_cost(ctx, a, m, n, k, 1, a.nbytes + b.nbytes + bias.nbytes, out_bytes(e))


@register("aten.bmm")
def bmm(e: OpEvent, ctx: CostContext) -> Cost:
    a, b = e.args[0], e.args[1]
    batch, m, k = a.shape
    n = b.shape[2]
    return gemm_cost(ctx, a, m, n, k, batch, a.nbytes + b.nbytes, out_bytes(e))


@register("aten.baddbmm")
def baddbmm(e: OpEvent, ctx: CostContext) -> Cost:
    c, a, b = e.args[0], e.args[1], e.args[2]
    batch, m, k = a.shape
    n = b.shape[2]
    return gemm_cost(ctx, a, m, n, k, batch, a.nbytes + b.nbytes + c.nbytes, out_bytes(e))


@register("aten.mv", "aten.addmv")
def mv(e: OpEvent, ctx: CostContext) -> Cost:
    mats = [a for a in e.args if isinstance(a, TensorMeta) and len(a.shape) == 2]
    a = mats[0]
    m, k = a.shape
    read = sum(t.nbytes for t in e.tensors())
    return gemm_cost(ctx, a, m, 1, k, 1, read, out_bytes(e))


@register("aten.dot", "aten.vdot")
def dot(e: OpEvent, ctx: CostContext) -> Cost:
    a = e.args[0]
    read = sum(t.nbytes for t in e.tensors())
    return gemm_cost(ctx, a, 1, 1, a.shape[0], 1, read, out_bytes(e))
