"""Transformers: Q, K and V projected by one GEMM; attention by one fused kernel."""

from __future__ import annotations

import math

from ...dtypes import torch_dtype
from ...kernels import pricing
from ...ops import CostContext, cost_of
from ...tracing import OpEvent, TensorMeta
from .. import fixes
from ..context import Step
from ..registry import TALK, Finding, rule
from .common import MIN_SHARE, priced, severity

# Rows of an attention module the fused kernel replaces.
ATTENTION_FAMILIES = ("matmul", "softmax", "dropout", "elementwise")
# The head size a fused kernel is priced with: the score matrix's rows say
# nothing of it (64 is GPT-2's and BERT's).
HEAD_DIM = 64


def fuse(ctx, step: Step, finding) -> Step:
    """The fix: each group of separate Q, K, V Linear layers as one."""
    return step._replace(model=ctx.build(fixes.fuse_qkv, step.model))


@rule(
    "fuse-qkv",
    "separate Q, K, V projections: concatenate them into one GEMM",
    f"{TALK}, 'Maximizing Tensor Core usage'",
    fix=fuse,
)
def fuse_qkv_rule(ctx):
    groups = fixes.qkv_groups(ctx.model)
    if not groups:
        return []
    finding = priced(
        ctx,
        "fuse-qkv",
        [p for p, _ in groups],
        {"attention_modules": len(groups)},
        "compute Q, K and V with one Linear of 3x the outputs and split it",
    )
    return [finding] if finding.gain_time_s > 0 else []


def _score_softmaxes(ctx) -> dict[str, list]:
    """Softmax rows over square score matrices (S x S, S >= 64), by module."""
    modules = {}
    for r in ctx.analysis.rows:
        shape = r.shapes[0] if r.family == "softmax" and r.shapes else ()
        if len(shape) >= 3 and shape[-1] >= 64 and shape[-1] == shape[-2]:
            modules.setdefault(r.module, []).append(r)
    return modules


def _fused_seconds(ctx, softmax, path: str) -> float:
    """Time of one fused attention op (forward or backward, as the softmax's
    phase) over the softmax's heads and sequence, priced by the cost model."""
    *lead, length, _ = softmax.shapes[0]
    heads = math.prod(lead)
    # a fused kernel runs in the policy's half precision (CUDA autocast keeps
    # the explicit softmax in float32, the kernel does not)
    dtype = ctx.precision.autocast_dtype or torch_dtype(softmax.dtype)
    q = TensorMeta(
        (1, heads, length, HEAD_DIM),
        dtype,
        (heads * length * HEAD_DIM, length * HEAD_DIM, HEAD_DIM, 1),
    )
    if softmax.phase == "forward":
        op, args = "aten._scaled_dot_product_flash_attention.default", (q, q, q)
    else:
        op, args = "aten._scaled_dot_product_flash_attention_backward.default", (q, q, q, q)
    event = OpEvent(op, args, {}, (q,), path, softmax.phase)
    return pricing.time(cost_of(event, CostContext(ctx.precision)), ctx.spec).seconds


@rule(
    "fused-attention",
    "explicit softmax(QK^T)V: use scaled_dot_product_attention",
    f"{TALK}, 'Transformers'; flash attention moves no S x S matrix",
)
def fused_attention(ctx):
    modules = _score_softmaxes(ctx)
    if not modules:
        return []
    saved, evidence = 0.0, {}
    for path, softmaxes in modules.items():
        explicit = sum(
            r.time_s
            for r in ctx.analysis.rows
            if r.module == path and r.family in ATTENTION_FAMILIES and r.phase != "optimizer"
        )
        fused = sum(_fused_seconds(ctx, sm, path) for sm in softmaxes)
        saved += max(0.0, explicit - fused)
        evidence[path] = {"explicit_time_s": explicit, "fused_time_s": fused}
    fraction = saved / ctx.step_time_s
    if fraction < MIN_SHARE:
        return []
    return [
        Finding(
            "fused-attention",
            severity(fraction),
            list(modules),
            evidence,
            "use torch.nn.functional.scaled_dot_product_attention (flash/memory-efficient)",
            saved,
            fraction,
            how="priced by the cost model: the attention rows against one fused "
            f"attention op of the same shape (head size taken as {HEAD_DIM})",
        )
    ]
