"""Mechanical fixes: each returns a new model (the user's is never changed)
whose outputs equal the original's, exactly or within dtype tolerance.

Fixes compose: each skips a layer an earlier fix already replaced (a Linear
fused with its Q, K, V siblings is not padded as well)."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ..models.layout import channels_last as channels_last  # the layout rule's fix
from ..models.layout import inputs_channels_last


def _copy(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _replace(model: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, new)


class PaddedLinear(nn.Module):
    """A Linear whose output features are padded with zero rows (for Tensor
    Core alignment); the padding is sliced off, so the output is unchanged."""

    def __init__(self, linear: nn.Linear, out_features: int):
        super().__init__()
        self.out_features = linear.out_features
        pad = out_features - linear.out_features
        w = linear.weight.detach()
        self.weight = nn.Parameter(torch.cat([w, w.new_zeros(pad, w.shape[1])]))
        self.bias = None
        if linear.bias is not None:
            b = linear.bias.detach()
            self.bias = nn.Parameter(torch.cat([b, b.new_zeros(pad)]))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)[..., : self.out_features]


def pad_linear_outputs(model: nn.Module, paths) -> nn.Module:
    """Pad the named Linear layers' output features to the given sizes
    (`paths`: {path: size}, or (path, size) pairs)."""
    fixed = _copy(model)
    for path, size in dict(paths).items():
        layer = fixed.get_submodule(path)
        if not isinstance(layer, nn.Linear):
            continue  # replaced by an earlier fix
        padded = PaddedLinear(layer, size)
        if not path:  # the model is the Linear itself
            return padded
        _replace(fixed, path, padded)
    return fixed


class ChannelsLastInputs(nn.Module):
    """Feeds the wrapped model its 4-D inputs in channels_last layout."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        return self.model(*inputs_channels_last(args), **kwargs)


class _FusedProjections(nn.Module):
    """One Linear computing q, k and v together; each shim returns its slice.
    The fused product is reused while the same input tensor comes back."""

    def __init__(self, layers: list[nn.Linear]):
        super().__init__()
        self.sizes = [layer.out_features for layer in layers]
        self.weight = nn.Parameter(torch.cat([layer.weight.detach() for layer in layers]))
        biases = [layer.bias for layer in layers]
        self.bias = None
        if all(b is not None for b in biases):
            self.bias = nn.Parameter(torch.cat([b.detach() for b in biases]))
        self._input = None
        self._parts = None

    def part(self, x, index: int):
        if self._input is not x:
            self._parts = F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)
            self._input = x
        out = self._parts[index]
        if index == len(self.sizes) - 1:
            self._input = self._parts = None  # do not hold tensors between calls
        return out


class _Slice(nn.Module):
    def __init__(self, fused: _FusedProjections, index: int):
        super().__init__()
        self.fused = [fused]  # a list: not registered twice as a submodule
        self.index = index

    def forward(self, x):
        return self.fused[0].part(x, self.index)


QKV_NAMES = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q", "k", "v"))


def qkv_groups(model: nn.Module) -> list[tuple[str, tuple[str, str, str]]]:
    """Modules holding separate q, k, v Linear layers of the same input size."""
    found = []
    for path, module in model.named_modules():
        for names in QKV_NAMES:
            layers = [getattr(module, n, None) for n in names]
            if all(isinstance(m, nn.Linear) for m in layers) and (
                len({m.in_features for m in layers}) == 1
            ):
                found.append((path, names))
    return found


def fuse_qkv(model: nn.Module) -> nn.Module:
    fixed = _copy(model)
    for path, names in qkv_groups(fixed):
        owner = fixed.get_submodule(path) if path else fixed
        fused = _FusedProjections([getattr(owner, n) for n in names])
        owner.add_module("qkv_fused", fused)
        for index, name in enumerate(names):
            setattr(owner, name, _Slice(fused, index))
    return fixed


class _PadChannels(nn.Module):
    """The first convolution with its input channels padded by zero channels."""

    def __init__(self, conv: nn.Conv2d, channels: int):
        super().__init__()
        self.extra = channels - conv.in_channels
        padded = nn.Conv2d(
            channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            conv.bias is not None,
            device=conv.weight.device,
            dtype=conv.weight.dtype,
        )
        with torch.no_grad():
            w = conv.weight.detach()
            padded.weight.copy_(
                torch.cat([w, w.new_zeros(w.shape[0], self.extra, *w.shape[2:])], 1)
            )
            if conv.bias is not None:
                padded.bias.copy_(conv.bias.detach())
        self.conv = padded

    def forward(self, x):
        return self.conv(F.pad(x, (0, 0, 0, 0, 0, self.extra)))


def pad_first_conv(model: nn.Module, path: str, channels: int = 4) -> nn.Module:
    fixed = _copy(model)
    padded = _PadChannels(fixed.get_submodule(path), channels)
    if not path:
        return padded
    _replace(fixed, path, padded)
    return fixed


def drop_conv_bias(model: nn.Module, pairs: list[tuple[str, str]]) -> nn.Module:
    """Remove the bias of convolutions followed by batch norm; in eval mode the
    norm's running mean absorbs it, so the output is unchanged in both modes."""
    fixed = _copy(model)
    for conv_path, bn_path in pairs:
        conv, bn = fixed.get_submodule(conv_path), fixed.get_submodule(bn_path)
        if not isinstance(conv, nn.Conv2d) or conv.bias is None:
            continue  # replaced by an earlier fix, or no bias
        if bn.running_mean is not None and not bn.running_mean.is_meta:
            with torch.no_grad():
                bn.running_mean.sub_(conv.bias.detach())
        conv.bias = None
    return fixed


class Autocast(nn.Module):
    """Runs the wrapped model under autocast (AMP) or with TF32 enabled."""

    def __init__(self, model: nn.Module, dtype: torch.dtype | None, device_type: str = "cuda"):
        super().__init__()
        self.model = model
        self.dtype = dtype
        self.device_type = device_type

    def forward(self, *args, **kwargs):
        if self.dtype is None:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            return self.model(*args, **kwargs)
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(*args, **kwargs)
