"""Fake stand-ins for the model's parameters and inputs, and the loss.

Nothing is allocated and the caller's model and tensors are never changed:
the parameters are swapped, for one `functional_call`, for fake tensors of
the same shapes and strides (in the precision policy's dtype), so a model
built on the meta device and one with real weights trace alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..errors import DlperfError
from ..precision import Precision
from .events import TensorMeta


@dataclass
class FakeCall:
    """What one traced call of the model runs on, and the parameter counts."""

    mode: FakeTensorMode
    state: dict[str, torch.Tensor]  # fake parameters and buffers, by name
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    params: int = 0
    trainable_params: int = 0
    param_shapes: list[tuple[int, ...]] = field(default_factory=list)
    trainable_shapes: list[tuple[int, ...]] = field(default_factory=list)

    def input_meta(self) -> list[TensorMeta]:
        tensors = (*self.args, *self.kwargs.values())
        return [TensorMeta.of(t) for t in tensors if isinstance(t, torch.Tensor)]


def fake_call(model: nn.Module, inputs, policy: Precision, training: bool) -> FakeCall:
    """Fake parameters, buffers and inputs for one call of `model`."""
    mode = FakeTensorMode()
    with mode:
        found = FakeCall(mode, {})
        for name, p in model.named_parameters():
            dtype = policy.param_dtype if p.is_floating_point() else p.dtype
            found.state[name] = _to_fake(p, dtype, training and p.requires_grad)
            found.param_shapes.append(tuple(p.shape))
            if p.requires_grad:
                found.trainable_shapes.append(tuple(p.shape))
            found.params += p.numel()
            found.trainable_params += p.numel() if p.requires_grad else 0
        for name, b in model.named_buffers():
            dtype = policy.param_dtype if b.is_floating_point() else b.dtype
            found.state[name] = _to_fake(b, dtype, False)
        found.args, found.kwargs = _fake_inputs(inputs, policy)
    return found


def _to_fake(t: torch.Tensor, dtype: torch.dtype | None, requires_grad: bool) -> torch.Tensor:
    """A fake CPU tensor like `t` (same shape, strides), in `dtype` if given."""
    fake = torch.empty_strided(
        tuple(t.shape), tuple(t.stride()), dtype=dtype or t.dtype, device="cpu"
    )
    if requires_grad and fake.is_floating_point():
        fake.requires_grad_(True)
    return fake


def _fake_inputs(inputs, policy: Precision):
    """Positional args and keyword args of the model call, as fake tensors."""
    half = policy.param_dtype if policy.param_dtype != torch.float32 else None

    def convert(x):
        if isinstance(x, torch.Tensor):
            # an input that asks for its gradient gets one (a module traced on its own)
            return _to_fake(x, half if x.is_floating_point() else None, x.requires_grad)
        if isinstance(x, (list, tuple)):
            return type(x)(convert(v) for v in x)
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        return x

    if isinstance(inputs, dict):
        return (), convert(inputs)
    if isinstance(inputs, torch.Tensor):
        return (convert(inputs),), {}
    if isinstance(inputs, (list, tuple)):
        return tuple(convert(v) for v in inputs), {}
    raise DlperfError(f"inputs must be a tensor, a tuple of tensors or a dict, not {type(inputs)}")


def _loss_of(out) -> torch.Tensor:
    """A scalar to differentiate: the model's own loss if it returns one, a
    cross-entropy on class logits, else the sum of its floating outputs."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, dict) and isinstance(out.get("loss"), torch.Tensor):
        return out["loss"]
    if isinstance(out, torch.Tensor) and out.dim() == 2 and out.is_floating_point():
        target = torch.zeros(out.shape[0], dtype=torch.long, device=out.device)
        return nn.functional.cross_entropy(out.float(), target)
    tensors = []

    def collect(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.requires_grad:
                tensors.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)
        elif isinstance(x, dict) or hasattr(x, "values"):
            for v in x.values():
                collect(v)

    collect(out)
    if not tensors:
        raise DlperfError(
            "the model's output needs no gradient (no trainable parameters reach it); use --infer"
        )
    total = tensors[0].float().sum()
    for t in tensors[1:]:
        total = total + t.float().sum()
    return total
