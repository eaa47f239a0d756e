"""Run the rules over one analysis; apply the mechanical fixes."""

from __future__ import annotations

from torch import nn

from ..errors import DlperfError
from ..run import Session, resolve
from . import MECHANICAL, Advice, Finding, fixes, load_rules
from .context import AdviceContext


def _context(
    model,
    inputs,
    gpu,
    precision,
    training,
    optimizer="adamw",
    batch=None,
    seq_len=None,
    session: Session | None = None,
) -> AdviceContext:
    run = resolve(
        model,
        inputs,
        gpu=gpu,
        precision=precision,
        training=training,
        optimizer=optimizer,
        batch=batch,
        seq_len=seq_len,
    )
    session = session or Session()
    ctx = AdviceContext(
        run.name,
        run.module,
        run.inputs,
        run.spec,
        run.precision,
        run.training,
        session.analysis(run),
        run.optimizer,
        run=run,
        session=session,
    )
    return ctx


def _check_rules(rules) -> list[str]:
    known = load_rules()
    if rules is None:
        return list(known)
    rules = [r.strip() for r in (rules.split(",") if isinstance(rules, str) else rules) if r]
    unknown = [r for r in rules if r not in known]
    if unknown:
        raise DlperfError(f"unknown rule {unknown[0]!r}; see `dlperf advise --list-rules`")
    return rules


def run_rules(ctx: AdviceContext, rules=None) -> list[Finding]:
    found = []
    for rule_id in _check_rules(rules):
        found += load_rules()[rule_id].check(ctx)
    return sorted(found, key=lambda f: (f.gain_time_s, f.gain_memory_bytes), reverse=True)


def apply_fixes(ctx: AdviceContext, findings: list[Finding]):
    """(model, inputs, precision) with every mechanical fix of `findings` applied."""
    model, inputs, precision = ctx.model, ctx.inputs, ctx.precision.name
    ids = {f.rule for f in findings}
    if "tensor-core-precision" in ids:
        half = (
            "bf16" if ctx.spec.has_dtype("bf16") and ctx.spec.uses_tensor_cores("bf16") else "fp16"
        )
        precision = f"amp-{half}"
    for f in findings:
        if f.rule in ("pad-vocabulary", "align-linear"):
            model = fixes.pad_linear_outputs(model, {p: e["padded"] for p, e in f.evidence.items()})
        elif f.rule == "conv-bias-before-bn":
            model = fixes.drop_conv_bias(model, _bias_pairs(model, f.modules))
        elif f.rule == "first-conv-channels":
            model = fixes.pad_first_conv(model, f.modules[0], f.evidence["padded"])
        elif f.rule == "fuse-qkv":
            model = fixes.fuse_qkv(model)
    if ids & {"channels-last", "first-conv-channels"}:
        model, inputs = fixes.channels_last(model, inputs)
    return model, inputs, precision


def _bias_pairs(model: nn.Module, convs: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for path in convs:
        parent, _, name = path.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        children = [n for n, _ in owner.named_children()]
        after = children[children.index(name) + 1]
        pairs.append((path, f"{parent}.{after}" if parent else after))
    return pairs


def advise(
    model,
    inputs=None,
    gpu="a100-sxm4-80gb",
    precision="auto",
    training=True,
    rules=None,
    optimizer="adamw",
    batch=None,
    seq_len=None,
    session: Session | None = None,
) -> Advice:
    ctx = _context(model, inputs, gpu, precision, training, optimizer, batch, seq_len, session)
    findings = run_rules(ctx, rules)
    mechanical = [f for f in findings if f.rule in MECHANICAL and f.gain_time_s > 0]
    after = ctx.step_time_s
    if len(mechanical) == 1 and mechanical[0].rule != "first-conv-channels":
        # its rule re-analysed the model with exactly this fix, so the gain is before - after
        # (first-conv-channels prices its padding on top of channels_last: a difference)
        after = ctx.step_time_s - mechanical[0].gain_time_s
    elif mechanical:
        fixed_model, fixed_inputs, fixed_precision = apply_fixes(ctx, mechanical)
        after = ctx.reanalyze(fixed_model, fixed_inputs, fixed_precision).time_s
    estimated = sum(f.gain_time_s for f in findings if f.rule not in MECHANICAL)
    after = max(after - estimated, 0.1 * after)
    return Advice(
        ctx.name, ctx.spec.id, ctx.precision.name, ctx.training, ctx.step_time_s, after, findings
    )


class ChannelsLastInputs(nn.Module):
    """Feeds 4-D inputs to the wrapped model in channels_last layout."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        import torch

        def convert(x):
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                return x.contiguous(memory_format=torch.channels_last)
            return x

        return self.model(*(convert(a) for a in args), **kwargs)


def fix(
    model, inputs=None, rules=None, gpu="a100-sxm4-80gb", precision="fp32", training=True
) -> nn.Module:
    """The model with every applicable mechanical fix (or those of `rules`) applied.

    Outputs are unchanged (exactly, or within the new dtype's tolerance for a
    precision change). The given model is not modified; its weights are kept.
    """
    ctx = _context(model, inputs, gpu, precision, training)
    chosen = [r for r in _check_rules(rules) if r in MECHANICAL]
    findings = [f for f in run_rules(ctx, chosen)]
    fixed, _, new_precision = apply_fixes(ctx, findings)
    if any(f.rule in ("channels-last", "first-conv-channels") for f in findings):
        fixed = ChannelsLastInputs(fixed)
    if new_precision != ctx.precision.name:
        import torch

        dtype = torch.bfloat16 if new_precision.endswith("bf16") else torch.float16
        fixed = fixes.Autocast(fixed, dtype)
    return fixed
