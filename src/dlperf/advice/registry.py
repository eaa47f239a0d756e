"""The rules' registry (`@rule`), what a rule finds, and the sources the rules cite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..jsonable import Jsonable, fields_dict

RULES: dict[str, Rule] = {}

# The documents behind the rules, named as a user can look them up: NVIDIA's
# deep-learning performance guides and a talk built on them.
GETTING_STARTED = "NVIDIA guide 'Get Started With Deep Learning Performance'"
MEMORY_LIMITED = "NVIDIA guide 'Optimizing Memory-Limited Layers'"
RECURRENT = "NVIDIA guide 'Optimizing Recurrent Layers'"
TALK = "NVIDIA talk 'NN Performance optimization' (P. Molchanov)"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    source: str  # the guide and section that motivate it
    check: Callable  # (ctx) -> list[Finding]
    # The mechanical fix, when there is one: (ctx, step, finding) -> step, where
    # a step (`context.Step`) is the model, its inputs and the precision name.
    fix: Callable | None = None
    # Whether a finding's gain is the step minus the step with this fix alone
    # (so `advise` need not re-analyse a single fix), or a difference on top of
    # another fix.
    priced_alone: bool = True
    # A what-if that changes the model's outputs (pruning): shown with its gain,
    # left out of the step "with every finding applied".
    changes_outputs: bool = False


ROOT_MODULE = "(model)"  # how a finding names the model's own forward


def module_path(name: str) -> str:
    """The module path a finding's module name stands for ("" for the root)."""
    return "" if name == ROOT_MODULE else name


@dataclass
class Finding(Jsonable):
    rule: str
    severity: str  # "high", "medium", "low"
    modules: list[str]
    evidence: dict
    fix: str
    gain_time_s: float = 0.0
    gain_fraction: float = 0.0
    gain_memory_bytes: float = 0.0
    how: str = "re-analysed with the fix applied"

    def __post_init__(self):
        # the root module's own ops carry an empty path: named, never a blank entry
        self.modules = [m or ROOT_MODULE for m in self.modules]


def rule(
    id: str,
    title: str,
    source: str,
    fix: Callable | None = None,
    priced_alone=True,
    changes_outputs=False,
):
    """Register a rule function `(ctx) -> list[Finding]`, once per id, with its
    mechanical fix when it has one."""

    def decorate(check):
        if id in RULES:
            raise ValueError(f"rule {id} registered twice")
        RULES[id] = Rule(id, title, source, check, fix, priced_alone, changes_outputs)
        return check

    return decorate


@dataclass
class Advice:
    model: str
    gpu: str
    precision: str
    training: bool
    predicted_time_s: float
    predicted_time_after_s: float
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The run, the findings, then the step before and after with the speedup."""
        after = self.predicted_time_after_s
        speedup = self.predicted_time_s / after if after else 1.0
        out = fields_dict(self, last=("predicted_time_s", "predicted_time_after_s"))
        return out | {"predicted_speedup": speedup}
