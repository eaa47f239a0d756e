"""A model and its inputs in another memory layout, for a run that uses it
(`--channels-last`) and for the advice that suggests it."""

from __future__ import annotations

import copy

import torch
from torch import nn


def inputs_channels_last(x):
    """Inputs (a tensor, or a list, tuple or dict of them) with 4-D tensors in NHWC."""
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if isinstance(x, (list, tuple)):
        return type(x)(inputs_channels_last(v) for v in x)
    if isinstance(x, dict):
        return {k: inputs_channels_last(v) for k, v in x.items()}
    return x


def channels_last(model: nn.Module, inputs):
    """A copy of the model and its 4-D inputs in NHWC memory format (the user's
    model is never changed)."""
    return copy.deepcopy(model).to(memory_format=torch.channels_last), inputs_channels_last(inputs)
