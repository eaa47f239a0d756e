"""Thin facade: the documented entry points, each handing off to one module."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .analysis import Analysis, analyze_trace
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .models import load_model
from .precision import precision as get_precision
from .trace import trace


def analyze(
    model: nn.Module | str,
    inputs=None,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "fp32",
    training: bool = True,
    batch: int | None = None,
    seq_len: int | None = None,
    optimizer: str = "adamw",
    progress: Callable[[int], None] | None = None,
) -> Analysis:
    """Predict every op of one training (or inference) step of `model` on `gpu`.

    `model` is an nn.Module (real weights or built on the meta device) or a
    name such as "torchvision:resnet50" or "hf:gpt2"; `inputs` a tensor, a
    tuple of tensors or a dict of keyword tensors (real or meta), or None for
    a named model's default inputs. Nothing is allocated and the model is not
    changed: it runs on fake tensors.
    """
    spec = get_gpu(gpu)
    policy = get_precision(precision)
    name = type(model).__name__
    if isinstance(model, str):
        loaded = load_model(model, batch=batch, seq_len=seq_len)
        name, model = loaded.name, loaded.module
        inputs = loaded.inputs if inputs is None else inputs
    if inputs is None:
        raise DlperfError("no inputs given: pass a tensor of the input's shape (meta is fine)")
    recorded = trace(model, inputs, training=training, precision=policy, progress=progress)
    return analyze_trace(recorded, spec, model_name=name, optimizer=optimizer if training else "")
