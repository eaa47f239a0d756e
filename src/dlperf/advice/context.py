"""What a rule reads: the analysis of one step, the model, and re-analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from ..analysis import Analysis, analyze_trace
from ..hardware import HardwareSpec
from ..precision import Precision
from ..precision import precision as get_precision
from ..run import Run, Session
from ..tracing import trace


@dataclass
class AdviceContext:
    name: str
    model: nn.Module
    inputs: object
    spec: HardwareSpec
    precision: Precision
    training: bool
    analysis: Analysis
    optimizer: str = "adamw"
    cache: dict = field(default_factory=dict)
    run: Run | None = None  # the run advised, and the session that traced it
    session: Session | None = None

    @property
    def step_time_s(self) -> float:
        return self.analysis.time_s

    def reanalyze(self, model=None, inputs=None, precision=None) -> Analysis:
        """The same step with a changed model, inputs or precision policy."""
        policy = get_precision(precision) if precision else self.precision
        recorded = trace(
            model if model is not None else self.model,
            inputs if inputs is not None else self.inputs,
            training=self.training,
            precision=policy,
        )
        return analyze_trace(
            recorded,
            self.spec,
            model_name=self.name,
            optimizer=self.optimizer if self.training else "",
        )

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
