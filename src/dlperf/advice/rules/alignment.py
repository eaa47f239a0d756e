"""Tensor Core alignment of Linear layers: output features, and the
vocabulary of an output projection, padded to the alignment multiple."""

from __future__ import annotations

from torch import nn

from .. import fixes
from ..context import Step
from ..registry import GETTING_STARTED, TALK, rule
from .common import MIN_SHARE, priced, rows_of, share, tensor_cores


def pad_linears(ctx, step: Step, finding) -> Step:
    """The fix: each Linear of the evidence padded to its `padded` features."""
    sizes = tuple((path, e["padded"]) for path, e in finding.evidence.items())
    return step._replace(model=ctx.build(fixes.pad_linear_outputs, step.model, sizes))


def _misaligned_linears(ctx, vocabulary: bool):
    """(path, layer, time) of the Linear layers, vocabulary projections or the
    others, whose output features miss the best multiple; the dtype; that multiple."""
    dtype = ctx.contraction_dtype()
    dtype = dtype if ctx.spec.has_dtype(dtype) else "fp32"
    if not tensor_cores(ctx.spec, dtype):
        return [], dtype, 1
    _, best = ctx.spec.alignment_elements(dtype)
    vocab_sizes = {m.num_embeddings for _, m in ctx.modules_of_type(nn.Embedding)}
    found = []
    for path, layer in ctx.modules_of_type(nn.Linear):
        is_vocab = layer.out_features in vocab_sizes or layer.out_features >= 16384
        if is_vocab != vocabulary or layer.out_features % best == 0:
            continue
        time = sum(r.time_s for r in rows_of(ctx, path))
        if share(ctx, time) >= MIN_SHARE:
            found.append((path, layer, time))
    return found, dtype, best


def _pad_check(rule_id: str, vocabulary: bool, what: str):
    """The check of a padding rule: one finding for every layer it pads."""

    def check(ctx):
        found, dtype, best = _misaligned_linears(ctx, vocabulary)
        if not found:
            return []
        sizes = {path: fixes.round_up(layer.out_features, best) for path, layer, _ in found}
        evidence = {
            path: {"out_features": layer.out_features, "padded": sizes[path], "time_s": time}
            for path, layer, time in found
        }
        fix = f"pad {what} to a multiple of {best} ({dtype} on {ctx.spec.id}): " + ", ".join(
            f"{p} {layer.out_features} -> {sizes[p]}" for p, layer, _ in found[:4]
        )
        finding = priced(ctx, rule_id, [p for p, _, _ in found], evidence, fix)
        # the padding may cost more than the alignment saves here
        return [finding] if finding.gain_time_s > 0 else []

    return check


# (rule, title, source, whether it pads vocabulary projections, what its fix pads)
PADDING_RULES = (
    (
        "pad-vocabulary",
        "vocabulary (output projection) not a multiple of 8/64",
        f"{TALK}, 'Transformers': vocabulary size a multiple of 8",
        True,
        "vocabulary",
    ),
    (
        "align-linear",
        "Linear features not multiples of the Tensor Core alignment",
        f"{GETTING_STARTED} §2.2; {TALK}, 'Linear layers' and the Tensor Core requirements table",
        False,
        "out_features",
    ),
)
for _id, _title, _source, _vocabulary, _what in PADDING_RULES:
    rule(_id, _title, _source, fix=pad_linears)(_pad_check(_id, _vocabulary, _what))
