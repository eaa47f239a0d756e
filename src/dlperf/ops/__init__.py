"""The op registry: one pure handler per aten overload packet.

A handler takes the recorded shapes of one call (an `OpEvent` of
`TensorMeta`s, never tensors) and a `CostContext` (the precision policy,
never the device), and returns a `Cost`: FLOPs, bytes read and written, the
GEMMs the op maps to, and hints only the device can resolve. Its category
and family are given when it is registered (`registry.register`).

To add an op: write the handler in the family module it belongs to (or use
a factory of `factories`: `elementwise`, `memory_bound`, `make_gemm` with
`contraction`) and register it on its `torch.ops.aten` packets.

An op with no handler is not silently free: `cost_of` returns None, the
analysis lists it in `unsupported_ops`, and prices it as memory-bound on its
inputs and outputs (`fallback`).
"""

from __future__ import annotations

from ..kinds import Category
from .cost import Cost, CostContext, Costed, Gemm, noted
from .factories import in_bytes, out_bytes, tensor_args
from .registry import (
    OWN_EVENT_PREFIX,
    aten_packet,
    cost_of,
    costed,
    existing,
    fallback,
    register,
    registered_packets,
)

# The categories every analysis reports, in order (views are not priced).
CATEGORIES = tuple(c.value for c in Category if c is not Category.VIEW)

# The family modules register their handlers as they are imported.
from . import attention, conv, elementwise, matmul, moe, movement, norm, pooling, rnn  # noqa: E402

__all__ = [
    "CATEGORIES",
    "OWN_EVENT_PREFIX",
    "Cost",
    "CostContext",
    "Costed",
    "Gemm",
    "aten_packet",
    "attention",
    "conv",
    "cost_of",
    "costed",
    "elementwise",
    "existing",
    "fallback",
    "in_bytes",
    "matmul",
    "moe",
    "movement",
    "noted",
    "norm",
    "out_bytes",
    "pooling",
    "register",
    "registered_packets",
    "rnn",
    "tensor_args",
]
