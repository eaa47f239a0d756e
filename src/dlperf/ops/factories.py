"""The shapes handlers share, made once: element-wise ops, memory-bound ops
(reductions, pooling, movement, losses, norm backwards), and the one GEMM
builder of matmuls, convolutions, attention and recurrent layers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..dtypes import name_of
from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, Gemm

Measure = Callable[[OpEvent], float]


def tensor_args(event: OpEvent) -> list[TensorMeta]:
    return [a for a in event.args if isinstance(a, TensorMeta)]


def out_bytes(event: OpEvent) -> int:
    return sum(t.nbytes for t in event.outputs)


def in_bytes(event: OpEvent) -> int:
    return sum(t.nbytes for t in event.tensors())


def first(event: OpEvent) -> TensorMeta | None:
    """The first tensor argument (the input of most ops), or None."""
    ts = tensor_args(event)
    return ts[0] if ts else None


def arguments(event: OpEvent) -> dict:
    """The event's arguments by their schema names (defaults where not recorded)."""
    packet, _, overload = event.op.rpartition(".")
    namespace, _, name = packet.partition(".")
    schema = getattr(getattr(getattr(torch.ops, namespace), name), overload)._schema
    found = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(event.args):
            found[arg.name] = event.args[i]
        elif arg.name in event.kwargs:
            found[arg.name] = event.kwargs[arg.name]
        elif arg.has_default_value():
            found[arg.name] = arg.default_value
    return found


def _nothing(event: OpEvent) -> float:
    return 0.0


def memory_bound(flops: Measure = _nothing, read: Measure = in_bytes, written: Measure = out_bytes):
    """A handler that reads `read(e)` bytes (default: every tensor input once),
    writes `written(e)` (default: the outputs) and does `flops(e)` FLOPs."""

    def handler(e: OpEvent, ctx: CostContext) -> Cost:
        return Cost(flops=flops(e), bytes_read=read(e), bytes_written=written(e))

    return handler


def elementwise(flops_per_element: float):
    """A handler that reads its tensor inputs once and writes its output once
    (the first argument, in place), doing `flops_per_element` per output element.

    Inputs smaller than the output (a broadcast bias, a scalar tensor) are
    read once: the cache serves their reuse.
    """

    def handler(e: OpEvent, ctx: CostContext) -> Cost:
        out = e.outputs[0] if e.outputs else first(e)
        if out is None:
            return Cost()
        read = sum(t.nbytes for t in e.tensors())
        return Cost(flops=flops_per_element * out.numel, bytes_read=read, bytes_written=out.nbytes)

    return handler


def make_gemm(
    ctx: CostContext, dtype: torch.dtype, m: int, n: int, k: int, batch: int = 1, **extra
) -> Gemm:
    """One GEMM on tensors of `dtype`: math in the dtype the precision policy
    runs contractions in, operands stored as `dtype`. `extra` takes the
    other fields of `Gemm` (count, role, tensor_bytes, launches, conv_reduction)."""
    return Gemm(
        m,
        n,
        k,
        batch=batch,
        dtype=ctx.precision.contraction_dtype(dtype),
        storage=name_of(dtype, "fp32"),
        **extra,
    )


def contraction(
    gemms, read: float, written: float, extra_flops: float = 0.0, kernels: int = 1, **hints
) -> Cost:
    """The cost of a GEMM-backed op: its GEMMs' FLOPs (plus `extra_flops` of
    bias, softmax or gate arithmetic), its bytes, and any hints."""
    gemms = tuple(gemms)
    return Cost(
        flops=sum(g.flops for g in gemms) + extra_flops,
        bytes_read=read,
        bytes_written=written,
        kernels=kernels,
        gemms=gemms,
        **hints,
    )
