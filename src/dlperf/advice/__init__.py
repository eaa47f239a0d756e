"""Advice: rules of the GPU performance guides, tied to layers, with gains.

Each rule is a function registered with `@rule` in one module of `rules/`
per family; it reads an `AdviceContext` (the analysis, the model, its inputs,
the device) and returns `Finding`s. A rule whose fix is a mechanical change
of the model registers that fix with it, and its finding's gain is the step
re-analysed with exactly that fix applied (`rules.common.priced`), never a
guess; where a fix is not mechanical (a different batch size, say), the
finding says how its gain was priced.
"""

from __future__ import annotations

from . import rules  # noqa: F401  (registers every rule)
from .registry import (
    GETTING_STARTED,
    MEMORY_LIMITED,
    RECURRENT,
    RULES,
    TALK,
    Advice,
    Finding,
    Rule,
    rule,
)

__all__ = [
    "GETTING_STARTED",
    "MEMORY_LIMITED",
    "RECURRENT",
    "RULES",
    "TALK",
    "Advice",
    "Finding",
    "Rule",
    "load_rules",
    "mechanical_rules",
    "rule",
]


def load_rules() -> dict[str, Rule]:
    """Every rule, registered when `rules` was imported."""
    return RULES


def mechanical_rules() -> list[str]:
    """The ids of the rules whose fix is applied automatically."""
    return [r.id for r in load_rules().values() if r.fix]
