"""The op registry: one pure handler per aten overload packet.

A handler takes the recorded shapes of one call (an `OpEvent` of
`TensorMeta`s, never tensors) and a `CostContext` (precision policy and
device), and returns a `Cost`: FLOPs, bytes read and written, the GEMMs the
op maps to, and a category. Conventions: one multiply-add is two FLOPs;
bytes are those the kernel must move through device memory.

An op with no handler is not silently free: `cost_of` returns None, the
analysis lists it in `unsupported_ops`, and prices it as memory-bound on its
inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..hardware import HardwareSpec
from ..precision import Precision
from ..tracing import OpEvent, TensorMeta

CATEGORIES = ("contraction", "normalization", "elementwise", "other")


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape an op runs `count` times (C[m,n] = A[m,k] B[k,n], `batch` at once)."""

    m: int
    n: int
    k: int
    batch: int = 1
    count: int = 1
    dtype: str = "fp32"  # math dtype
    storage: str = "fp32"  # element dtype in memory
    role: str = ""  # e.g. "fprop", "dgrad", "wgrad", "recurrent"
    # Bytes the kernel really moves when its operands are implicit (a
    # convolution's im2col matrix is never stored); 0 means the GEMM's own.
    tensor_bytes: float = 0.0
    # Kernel launches the `count` GEMMs take; 0 means one each. A persistent RNN
    # kernel runs every step of a sequence in one launch.
    launches: int = 0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch * self.count


@dataclass(frozen=True)
class Cost:
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    category: str = "other"
    family: str = ""
    gemms: tuple[Gemm, ...] = ()
    kernels: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            flops=self.flops + other.flops,
            bytes_read=self.bytes_read + other.bytes_read,
            bytes_written=self.bytes_written + other.bytes_written,
            category=self.category,
            family=self.family,
            gemms=self.gemms + other.gemms,
            kernels=self.kernels + other.kernels,
            notes=self.notes + other.notes,
        )


@dataclass(frozen=True)
class CostContext:
    precision: Precision
    spec: HardwareSpec


Handler = Callable[[OpEvent, CostContext], Cost]
_REGISTRY: dict[str, Handler] = {}
# dlperf's own module-level events (recurrent layers) are not aten ops.
OWN_EVENT_PREFIX = "dlperf."


def aten_packet(name: str) -> torch._ops.OpOverloadPacket | None:
    """The installed torch's overload packet for "aten.NAME", or None."""
    namespace, _, op = name.partition(".")
    if namespace != "aten" or not op:
        return None
    packet = getattr(torch.ops.aten, op, None)
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) else None


def existing(*names: str) -> tuple[str, ...]:
    """The names among `names` that are aten ops of the installed torch (for
    optional variants such as an in-place `aten.relu_` beside `aten.relu`)."""
    return tuple(n for n in names if aten_packet(n) is not None)


def register(*packets: str):
    """Register a handler for aten overload packets ("aten.mm"); once each.

    Every name must be an overload packet of the installed torch (or one of
    dlperf's own "dlperf." events): a misspelt or missing op fails at import,
    never silently costs nothing.
    """

    def decorate(fn: Handler) -> Handler:
        for packet in packets:
            if not packet.startswith(OWN_EVENT_PREFIX) and aten_packet(packet) is None:
                raise ValueError(f"{packet} is not an aten op of torch {torch.__version__}")
            if packet in _REGISTRY:
                raise ValueError(f"{packet} already has a cost handler")
            _REGISTRY[packet] = fn
        return fn

    return decorate


def handler_for(event: OpEvent) -> Handler | None:
    _load_families()
    return _REGISTRY.get(event.packet)


def cost_of(event: OpEvent, ctx: CostContext) -> Cost | None:
    """The event's cost, or None when no handler knows its op."""
    fn = handler_for(event)
    return fn(event, ctx) if fn else None


def fallback_cost(event: OpEvent) -> Cost:
    """Price of an op nobody handles: memory-bound on its inputs and outputs."""
    read = sum(t.nbytes for t in event.tensors())
    written = sum(t.nbytes for t in event.outputs)
    return Cost(bytes_read=read, bytes_written=written, category="other", family="unsupported")


def registered_packets() -> list[str]:
    _load_families()
    return sorted(_REGISTRY)


# -- helpers shared by the handler modules ---------------------------------


def tensor_args(event: OpEvent) -> list[TensorMeta]:
    return [a for a in event.args if isinstance(a, TensorMeta)]


def out_bytes(event: OpEvent) -> int:
    return sum(t.nbytes for t in event.outputs)


def in_bytes(event: OpEvent) -> int:
    return sum(t.nbytes for t in event.tensors())


_LOADED = False


def _load_families() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import attention, conv, elementwise, matmul, movement, norm, pooling, rnn  # noqa: F401
