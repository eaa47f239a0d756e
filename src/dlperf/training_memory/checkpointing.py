"""Activation checkpointing over the model's repeated blocks: what it keeps,
and what backward recomputes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import DlperfError
from ..tracing import Trace, within

CHECKPOINT_HELP = "none, blocks, every:K or sqrt"


@dataclass(frozen=True)
class CheckpointPlan:
    """Activation memory and recompute cost of one checkpointing policy."""

    policy: str
    activations_bytes: int
    recompute_s: float
    segments: int


def parse_checkpoint(text: str) -> tuple[str, int]:
    """'every:4' -> ('every', 4); none, blocks and sqrt take no K."""
    text = (text or "none").lower()
    if text in ("none", "blocks", "sqrt"):
        return text, 1
    kind, _, k = text.partition(":")
    if kind == "every" and k.isdigit() and int(k) >= 1:
        return "every", int(k)
    raise DlperfError(f"unknown checkpoint policy {text!r}; use {CHECKPOINT_HELP}")


def _activations_per_block(trace: Trace) -> tuple[dict[str, int], int]:
    """Saved activations of each repeated block, and of everything outside them."""
    per_block = {b: 0 for b in trace.blocks}
    outside = 0
    for t in trace.saved:
        if t.kind != "activation":
            continue
        owner = next((b for b in trace.blocks if within(t.module, b)), None)
        if owner is None:
            outside += t.nbytes
        else:
            per_block[owner] += t.nbytes
    return per_block, outside


def checkpoint_plan(trace: Trace, policy: str, forward_time: dict[str, float]) -> CheckpointPlan:
    """Activations when the repeated blocks are checkpointed in segments.

    A checkpointed segment keeps only its input; its own activations come back,
    one segment at a time, when backward recomputes its forward.
    """
    kind, k = parse_checkpoint(policy)
    blocks = trace.blocks
    if kind == "none" or not blocks:
        return CheckpointPlan(
            "none" if kind == "none" else f"{policy} (no repeated blocks)",
            trace.activation_bytes,
            0.0,
            0,
        )
    per_block, outside = _activations_per_block(trace)
    if kind == "sqrt":
        k = max(1, math.ceil(math.sqrt(len(blocks))))
    elif kind == "blocks":
        k = 1
    segments = [blocks[i : i + k] for i in range(0, len(blocks), k)]
    kept = sum(trace.module_inputs.get(seg[0], 0) for seg in segments)
    largest = max(sum(per_block[b] for b in seg) for seg in segments)
    recompute = sum(forward_time.get(b, 0.0) for b in blocks)
    return CheckpointPlan(
        f"{kind}" + (f":{k}" if kind == "every" else ""),
        int(outside + kept + largest),
        recompute,
        len(segments),
    )
