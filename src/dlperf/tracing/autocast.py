"""CUDA autocast's float32 ops, on the CPU's fake tensors.

dlperf traces under CPU autocast (the fake tensors live on the CPU), but
CPU and CUDA autocast keep different lists. On CUDA, ops whose half-precision
result loses too much (softmax, log_softmax, layer and group norm, exp, log,
pow, sum, the losses ...) run in float32: autocast casts their half inputs up
first, so the model moves float32 tensors there (an eager attention's
probabilities, say, are float32 on the GPU). CPU autocast leaves most of
them in half precision. This function mode casts the half-precision tensor
arguments of those calls to float32 before they run, which is what CUDA
autocast does (the list is PyTorch's documented "CUDA ops that can autocast
to float32"). The casts are recorded as the `_to_copy` calls they are.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# PyTorch's documented CUDA autocast float32 list (torch.amp docs), by name.
CUDA_FLOAT32_OPS = [
    "__pow__",
    "__rdiv__",
    "__rpow__",
    "__rtruediv__",
    "acos",
    "asin",
    "binary_cross_entropy_with_logits",
    "cosh",
    "cosine_embedding_loss",
    "cdist",
    "cosine_similarity",
    "cross_entropy",
    "cumprod",
    "cumsum",
    "dist",
    "erfinv",
    "exp",
    "expm1",
    "group_norm",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "log",
    "log_softmax",
    "log10",
    "log1p",
    "log2",
    "margin_ranking_loss",
    "mse_loss",
    "multilabel_margin_loss",
    "multi_margin_loss",
    "nll_loss",
    "norm",
    "normalize",
    "pdist",
    "poisson_nll_loss",
    "pow",
    "prod",
    "reciprocal",
    "rsqrt",
    "sinh",
    "smooth_l1_loss",
    "soft_margin_loss",
    "softmax",
    "softmin",
    "softplus",
    "sum",
    "renorm",
    "tan",
    "triplet_margin_loss",
]
_HALF = (torch.float16, torch.bfloat16)


def _functions() -> frozenset:
    """The callables (torch.X, torch.nn.functional.X, Tensor.X) of the float32 list."""
    found = set()
    for name in CUDA_FLOAT32_OPS:
        for home in (torch, torch.nn.functional, torch.Tensor):
            f = getattr(home, name, None)
            if callable(f):
                found.add(f)
    return frozenset(found)


def _up(x):
    if isinstance(x, torch.Tensor) and x.dtype in _HALF:
        return x.float()
    if isinstance(x, (list, tuple)):
        return type(x)(_up(v) for v in x)
    return x


class CudaAutocastFloat32(TorchFunctionMode):
    """Casts half-precision arguments of CUDA autocast's float32 ops to float32."""

    def __init__(self):
        super().__init__()
        self.functions = _functions()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # an explicit output dtype is kept, as CUDA autocast keeps it
        cast = kwargs.get("dtype") is None and torch.is_autocast_enabled("cpu")
        if cast and func in self.functions:
            args = tuple(_up(a) for a in args)
            kwargs = {k: _up(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)
