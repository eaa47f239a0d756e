"""What a rule reads: the run advised, its analysis, and re-analysis of fixes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from torch import nn

from ..analysis import Analysis
from ..hardware import HardwareSpec
from ..precision import Precision
from ..run import Run, Session


class Step(NamedTuple):
    """What a mechanical fix changes: the model, its inputs, the precision's name."""

    model: nn.Module
    inputs: object
    precision: str


@dataclass
class AdviceContext:
    run: Run
    session: Session  # traces each (model, inputs, precision) once
    analysis: Analysis  # the run's, from the session
    # Fixed models built so far, by builder and arguments (see `build`).
    built: dict = field(default_factory=dict, repr=False)
    # What the rules read most, from the run.
    name: str = field(init=False)
    model: nn.Module = field(init=False, repr=False)
    inputs: object = field(init=False, repr=False)
    spec: HardwareSpec = field(init=False, repr=False)
    precision: Precision = field(init=False)
    training: bool = field(init=False)

    def __post_init__(self):
        run = self.run
        self.name, self.model, self.inputs = run.name, run.module, run.inputs
        self.spec, self.precision, self.training = run.spec, run.precision, run.training

    @property
    def step(self) -> Step:
        """The step as advised, before any fix."""
        return Step(self.model, self.inputs, self.precision.name)

    @property
    def step_time_s(self) -> float:
        """The step's kernels (a fix of a kernel is priced on them; the host's
        waits are the rules on how the step runs, see `reanalyze_run`)."""
        return self.analysis.time_s

    def reanalyze_run(self, **how) -> Analysis:
        """The same step run another way (`compile=True`, `cuda_graphs=True` ...)."""
        return self.session.analysis(dataclasses.replace(self.run, **how))

    def reanalyze(self, model=None, inputs=None, precision=None) -> Analysis:
        """The same step with a changed model, inputs or precision policy,
        through the session: a model object is traced once per inputs and policy."""
        run = self.run.with_module(
            self.model if model is None else model,
            None if inputs is self.inputs else inputs,  # unchanged: the trace may be spliced
        )
        return self.session.analysis(run.with_precision(precision) if precision else run)

    def build(self, builder: Callable, *args):
        """`builder(*args)`, built once per builder and arguments (objects by
        identity): a rule and `apply` that make the same fix get the same
        model object, which the session then traces once."""
        key = (builder, *(_key(a) for a in args))
        if key not in self.built:
            self.built[key] = (args, builder(*args))  # holding the args keeps their ids theirs
        return self.built[key][1]

    def gain_of(self, after: Analysis, per_sample: bool = False) -> tuple[float, float]:
        """(seconds saved per step, fraction of the step) going from now to `after`."""
        before = self.step_time_s
        new = after.time_s
        if per_sample and after.batch:
            new = after.time_s * self.analysis.batch / after.batch
        return before - new, (before - new) / before if before else 0.0

    def modules_of_type(self, *types: type) -> list[tuple[str, nn.Module]]:
        return [(p, m) for p, m in self.model.named_modules() if isinstance(m, types)]

    def contraction_dtype(self) -> str:
        return self.analysis.contraction_dtype


def _key(value):
    """A build argument as a dictionary key: plain values by value, models and
    tensors by identity (a tensor never compares as a key by its elements)."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, tuple):
        return tuple(_key(v) for v in value)
    return ("object", id(value))
