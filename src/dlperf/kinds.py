"""The small vocabularies every stage shares: what limits a kernel, which
phase of a step an op runs in, what kind of work it is, and which losses the
guides name. Each is a `str` enum, so it compares equal to, and serialises
as, the plain string the JSON contract promises ("math", "forward", ...).
"""

from __future__ import annotations

from enum import Enum


class _Named(str, Enum):
    def __str__(self) -> str:
        return self.value


class Bound(_Named):
    """Which term sets a kernel's predicted time (`roofline.limiter`)."""

    MATH = "math"
    MEMORY = "memory"
    LATENCY = "latency"


class Phase(_Named):
    FORWARD = "forward"
    BACKWARD = "backward"
    # Forward work that activation checkpointing runs again during backward.
    RECOMPUTE = "recompute"
    OPTIMIZER = "optimizer"


class Category(_Named):
    CONTRACTION = "contraction"
    NORMALIZATION = "normalization"
    ELEMENTWISE = "elementwise"
    OTHER = "other"
    VIEW = "view"


class LossKind(_Named):
    """The efficiency losses the guides warn about."""

    TILE = "tile"  # partial thread-block tiles compute padding
    WAVE = "wave"  # the last wave of tiles leaves SMs idle
    ALIGNMENT = "alignment"  # a dimension breaks Tensor Core alignment
    LAYOUT = "layout"  # NCHW data transposed for Tensor Core kernels
    REREAD = "reread"  # an input read again: its working set does not fit on chip
    LATENCY = "latency"  # too little work to fill the device


def module_at_depth(module: str, depth: int) -> str:
    """A module path cut at `depth` levels, as reports sum by module ("(model)"
    for ops outside any submodule)."""
    return ".".join(module.split(".")[:depth]) if module else "(model)"
