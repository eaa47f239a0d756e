"""Run the rules over one analysis; apply the mechanical fixes.

`advise` finds and prices; `apply` applies the fixes of chosen rules and
re-analyses; `fix` returns the fixed model itself. All three take a model
(name, module or `run.Run`) and share a `run.Session` when given one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..errors import DlperfError
from ..jsonable import Jsonable
from ..precision import precision as get_precision
from ..run import Session, resolve
from . import Advice, Finding, fixes, load_rules, mechanical_rules
from .context import AdviceContext, Step


def _context(model, inputs=None, config=None, session: Session | None = None,
             **options) -> AdviceContext:  # fmt: skip
    """The advised run, resolved from `config` and `options` (`RunConfig.build`'s
    keywords), with its analysis from the session (a new one unless given)."""
    run = resolve(model, inputs, config, verb="advise", **options)
    session = session or Session()
    return AdviceContext(run, session, session.analysis(run))


def _check_rules(rules) -> list[str]:
    known = load_rules()
    if rules is None:
        return list(known)
    rules = [r.strip() for r in (rules.split(",") if isinstance(rules, str) else rules) if r]
    unknown = [r for r in rules if r not in known]
    if unknown:
        raise DlperfError(f"unknown rule {unknown[0]!r}; see `dlperf advise --list-rules`")
    return rules


def check_fixable(rules) -> list[str]:
    """The rule ids of `rules` (all that have a fix when None), refused unless
    each has an automatic fix; checked before anything is traced."""
    known, chosen = load_rules(), _check_rules(rules)
    if rules is None:
        return [r for r in chosen if known[r].fix]
    manual = [r for r in chosen if not known[r].fix]
    if manual:
        raise DlperfError(
            f"rule {manual[0]} has no automatic fix (its finding says what to change); "
            f"--apply takes: {', '.join(mechanical_rules())}"
        )
    return chosen


def run_rules(ctx: AdviceContext, rules=None) -> list[Finding]:
    found = []
    for rule_id in _check_rules(rules):
        found += load_rules()[rule_id].check(ctx)
    return sorted(found, key=lambda f: (f.gain_time_s, f.gain_memory_bytes), reverse=True)


def apply_fixes(ctx: AdviceContext, findings: list[Finding]) -> Step:
    """The step with the mechanical fix of each finding's rule applied, in the
    findings' order (a fix skips what an earlier one replaced)."""
    step = ctx.step
    for finding in findings:
        fix = load_rules()[finding.rule].fix
        if fix is not None:
            step = fix(ctx, step, finding)
    return step


def advise(model, inputs=None, config=None, *, rules=None, session: Session | None = None,
           **options) -> Advice:  # fmt: skip
    """The guides' rules over one step of `model`, each finding tied to a layer
    with its predicted gain. The run is `config` with `options` laid over it,
    as for `dlperf.analyze`; `rules` limits the rule ids run."""
    ctx = _context(model, inputs, config, session, **options)
    findings = run_rules(ctx, rules)
    known = load_rules()
    mechanical = [f for f in findings if known[f.rule].fix and f.gain_time_s > 0]
    after = ctx.step_time_s
    if len(mechanical) == 1 and known[mechanical[0].rule].priced_alone:
        # its rule re-analysed the model with exactly this fix: the gain is before - after
        after = ctx.step_time_s - mechanical[0].gain_time_s
    elif mechanical:
        after = ctx.reanalyze(*apply_fixes(ctx, mechanical)).time_s
    estimated = sum(
        f.gain_time_s
        for f in findings
        if not known[f.rule].fix and not known[f.rule].changes_outputs
    )
    after = max(after - estimated, 0.1 * after)
    return Advice(
        ctx.name, ctx.spec.id, ctx.precision.name, ctx.training, ctx.step_time_s, after, findings
    )


@dataclass
class Applied(Jsonable):
    """The automatic fixes applied to a step, and the step predicted before and after."""

    applied: list[str]  # rule ids
    predicted_time_s: float
    predicted_time_after_s: float

    @property
    def speedup(self) -> float:
        after = self.predicted_time_after_s
        return self.predicted_time_s / after if after else 1.0


def apply(model, rules=None, inputs=None, config=None, *, session: Session | None = None,
          **options) -> Applied:  # fmt: skip
    """Apply the automatic fixes of `rules` (every rule with one when None)
    where their rules find something, and predict the step before and after.
    The run as for `advise`."""
    chosen = check_fixable(rules)
    ctx = _context(model, inputs, config, session, **options)
    findings = run_rules(ctx, chosen)
    after = ctx.reanalyze(*apply_fixes(ctx, findings)).time_s
    return Applied(sorted({f.rule for f in findings}), ctx.step_time_s, after)


def fix(model, inputs=None, rules=None, config=None, **options) -> nn.Module:
    """The model with every applicable mechanical fix (or those of `rules`) applied.

    Outputs are unchanged (exactly, or within the new dtype's tolerance for a
    precision change). The given model is not modified; its weights are kept.
    The run as for `advise`.
    """
    ctx = _context(model, inputs, config, **options)
    chosen = [r for r in _check_rules(rules) if r in mechanical_rules()]
    step = apply_fixes(ctx, run_rules(ctx, chosen))
    fixed = step.model
    if step.inputs is not ctx.inputs:  # a layout fix converted them: so must every call
        fixed = fixes.ChannelsLastInputs(fixed)
    if step.precision != ctx.precision.name:  # a precision fix: the model runs under autocast
        fixed = fixes.Autocast(fixed, get_precision(step.precision).autocast_dtype)
    return fixed
