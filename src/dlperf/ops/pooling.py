"""Pooling and resampling: memory-bound.

Forward reads the input once (each element is reused by up to
win_h x win_w windows, which the cache serves: seed 000, chapter 5) and
writes the output (and max pooling's indices); a window of w elements costs
w FLOPs per output. Backward reads the output gradient (and indices) and
writes the whole input gradient.
"""

from __future__ import annotations

from math import prod

import torch

from ..kinds import Category
from ..tracing import OpEvent
from .factories import first, memory_bound, tensor_args
from .registry import aten_ops, register

aten = torch.ops.aten
_POOLING = {"category": Category.OTHER, "family": "pooling"}
_UPSAMPLE = {"category": Category.OTHER, "family": "upsample"}


def _window(e: OpEvent) -> int:
    for a in e.args[1:]:
        if isinstance(a, (list, tuple)) and a and all(isinstance(v, int) for v in a):
            return prod(a)
    return 1


def _grad_and_indices(e: OpEvent) -> int:
    """The output gradient, and max pooling's indices (the integer tensors after the input)."""
    return first(e).nbytes + sum(t.nbytes for t in tensor_args(e)[2:] if not t.is_float)


register(
    *aten_ops(
        """
        max_pool2d_with_indices max_pool3d_with_indices max_pool2d max_pool1d avg_pool2d
        avg_pool3d avg_pool1d max_pool1d_with_indices
        """
    ),
    **_POOLING,
)(memory_bound(flops=lambda e: _window(e) * e.outputs[0].numel))

register(
    *aten_ops(
        """
        _adaptive_avg_pool2d _adaptive_avg_pool3d adaptive_max_pool2d adaptive_max_pool3d
        adaptive_avg_pool1d adaptive_max_pool1d
        """
    ),
    **_POOLING,
)(memory_bound(flops=lambda e: first(e).numel))

register(
    *aten_ops(
        """
        max_pool2d_with_indices_backward max_pool3d_with_indices_backward avg_pool2d_backward
        avg_pool3d_backward _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward
        adaptive_max_pool2d_backward adaptive_max_pool3d_backward
        """
    ),
    **_POOLING,
)(memory_bound(flops=lambda e: first(e).numel, read=_grad_and_indices))

register(
    *aten_ops(
        """
        upsample_nearest2d upsample_bilinear2d upsample_bicubic2d upsample_nearest1d
        upsample_linear1d upsample_nearest3d upsample_trilinear3d _upsample_nearest_exact2d
        _upsample_bilinear2d_aa grid_sampler_2d
        """
    ),
    **_UPSAMPLE,
)(memory_bound(flops=lambda e: 4 * e.outputs[0].numel))

register(
    *aten_ops(
        """
        upsample_nearest2d_backward upsample_bilinear2d_backward upsample_bicubic2d_backward
        upsample_nearest1d_backward upsample_linear1d_backward upsample_nearest3d_backward
        upsample_trilinear3d_backward _upsample_nearest_exact2d_backward
        grid_sampler_2d_backward
        """
    ),
    **_UPSAMPLE,
)(memory_bound(flops=lambda e: 4 * first(e).numel, read=lambda e: first(e).nbytes))
