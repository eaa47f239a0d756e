"""What an op's handler returns: its `Cost` (`costs`) with the labels
of the op, and the context a handler may read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..costs import AttentionShape, Cost, Gemm
from ..kinds import Category
from ..precision import Precision

__all__ = ["AttentionShape", "Cost", "CostContext", "Costed", "Gemm", "noted"]


class Costed(NamedTuple):
    """A cost with the labels of the op it prices (from the handler's
    registration unless the handler narrows them) and its handler's remarks."""

    cost: Cost
    category: Category | None = None
    family: str | None = None
    remarks: tuple[str, ...] = ()


def noted(cost: Cost, *remarks: str, family: str | None = None) -> Costed:
    """A handler's cost with remarks for the reader (and a narrower family)."""
    return Costed(cost, family=family, remarks=remarks)


@dataclass(frozen=True)
class CostContext:
    """What a handler may know beyond the call: the precision policy, never the device."""

    precision: Precision
