"""Recurrent layers: sizes aligned for Tensor Cores and small enough for the
persistent kernels."""

from __future__ import annotations

from ...ops.rnn import PERSISTENT_MAX_HIDDEN
from .. import fixes
from ..registry import RECURRENT, Finding, rule


def _size_advice(layer, batch: int, dtype: str) -> list[str]:
    """What to change in a recurrent layer's hidden size and minibatch."""
    hidden = layer.hidden_size
    advice = []
    if dtype == "fp16":
        target = fixes.round_up(hidden, 32)
        if hidden % 32:
            persistent = target <= PERSISTENT_MAX_HIDDEN.get(layer.mode, 1024)
            note = (
                "for Tensor Cores and the persistent kernel" if persistent else "for Tensor Cores"
            )
            advice.append(f"hidden size {hidden} -> {target} ({note})")
        if batch % 8:
            advice.append(f"minibatch {batch} -> {fixes.round_up(batch, 8)}")
    elif dtype in ("fp32", "tf32"):
        advice.append("train in fp16 (AMP): Tensor Cores and persistent RNN kernels")
        if hidden % 4:
            advice.append(f"hidden size {hidden} -> {fixes.round_up(hidden, 4)}")
    return advice


@rule(
    "rnn-sizes",
    "recurrent layer sizes: alignment and persistent kernels",
    f"{RECURRENT}, chapter 1 checklist and chapter 5 (persistence)",
)
def rnn_sizes(ctx):
    findings = []
    for r in ctx.analysis.rows:
        if r.family != "rnn" or r.phase != "forward":
            continue
        layer = ctx.model.get_submodule(r.module) if r.module else ctx.model
        batch = next((g.n for g in r.gemms if g.role == "recurrent forward"), 0)
        advice = _size_advice(layer, batch, r.dtype)
        if advice:
            findings.append(
                Finding(
                    "rnn-sizes",
                    "medium",
                    [r.module],
                    {"hidden_size": layer.hidden_size, "minibatch": batch, "dtype": r.dtype},
                    "; ".join(advice),
                    0.0,
                    0.0,
                    how="a size change alters the model: no gain is predicted",
                )
            )
    return findings
