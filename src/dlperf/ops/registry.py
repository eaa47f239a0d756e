"""The op registry: one pure handler per aten overload packet, with the
category and family of the ops it prices.

Every key is an overload packet of the installed torch (or one of dlperf's
own "dlperf." events), checked at registration: a misspelt or missing op
fails at import, never silently costs nothing. Ops that move no data (views,
metadata, allocation) have no handler: the tracer counts them
(`tracing.views`), and nothing else decides what a view is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..kinds import Category
from ..tracing import OpEvent
from .cost import Cost, CostContext, Costed

Handler = Callable[[OpEvent, CostContext], "Cost | Costed"]
# dlperf's own module-level events (recurrent layers) are not aten ops.
OWN_EVENT_PREFIX = "dlperf."


@dataclass(frozen=True)
class Entry:
    handler: Handler
    category: Category
    family: str


_REGISTRY: dict[str, Entry] = {}


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


def aten_ops(names: str) -> list[str]:
    """ "aten.NAME" for each of the whitespace-separated `names` (checked when registered)."""
    return [f"aten.{name}" for name in names.split()]


def packet_name(packet) -> str:
    """ "aten.mm" for `torch.ops.aten.mm` or "aten.mm"; refused unless torch has it."""
    if isinstance(packet, torch._ops.OpOverloadPacket):
        return packet._qualified_op_name.replace("::", ".")
    name = str(packet)
    if not name.startswith(OWN_EVENT_PREFIX) and aten_packet(name) is None:
        raise ValueError(f"{name} is not an aten op of torch {torch.__version__}")
    return name


def register(*packets, category: Category, family: str):
    """Register a handler for overload packets (`torch.ops.aten.mm` or
    "aten.mm"), once each, with the category and family of what it prices."""

    def decorate(fn: Handler) -> Handler:
        for packet in packets:
            name = packet_name(packet)
            if name in _REGISTRY:
                raise ValueError(f"{name} already has a cost handler")
            _REGISTRY[name] = Entry(fn, Category(category), family)
        return fn

    return decorate


def costed(event: OpEvent, ctx: CostContext) -> Costed | None:
    """The event's cost with its labels, or None when no handler knows its op."""
    entry = _REGISTRY.get(event.packet)
    if entry is None:
        return None
    found = entry.handler(event, ctx)
    if type(found) is Cost:
        return Costed(found, entry.category, entry.family)
    category, family = found.category or entry.category, found.family or entry.family
    return Costed(found.cost, category, family, found.remarks)


def labels_of(event: OpEvent) -> tuple[Category, str] | None:
    """The category and family the event's handler was registered with (None: no handler)."""
    entry = _REGISTRY.get(event.packet)
    return (entry.category, entry.family) if entry else None


def cost_of(event: OpEvent, ctx: CostContext) -> Cost | None:
    """The event's cost, or None when no handler knows its op."""
    found = costed(event, ctx)
    return found.cost if found else None


def fallback(event: OpEvent) -> Costed:
    """Price of an op nobody handles: memory-bound on its inputs and outputs."""
    read = sum(t.nbytes for t in event.tensors())
    written = sum(t.nbytes for t in event.outputs)
    return Costed(Cost(bytes_read=read, bytes_written=written), Category.OTHER, "unsupported")


def registered_packets() -> list[str]:
    return sorted(_REGISTRY)
