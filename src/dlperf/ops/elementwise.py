"""Element-wise ops, made by one factory: each reads its tensor inputs once
and writes its output once, doing a few FLOPs per output element.

Inputs smaller than the output (a broadcast bias, a scalar tensor) are read
once: the cache serves their reuse. Dropout writes its mask too.
"""

from __future__ import annotations

import torch

from ..kinds import Category
from ..tracing import OpEvent
from .cost import Cost, CostContext
from .factories import elementwise, first, memory_bound, out_bytes
from .registry import aten_ops, existing, register

aten = torch.ops.aten
_ELEMENTWISE = Category.ELEMENTWISE

# FLOPs per output element, by op (1 where not listed).
_UNARY = {
    "abs": 1,
    "neg": 1,
    "relu": 1,
    "sign": 1,
    "ceil": 1,
    "floor": 1,
    "round": 1,
    "exp": 4,
    "exp2": 4,
    "expm1": 4,
    "log": 4,
    "log2": 4,
    "log1p": 4,
    "sqrt": 2,
    "rsqrt": 2,
    "reciprocal": 1,
    "sigmoid": 4,
    "tanh": 4,
    "erf": 4,
    "erfinv": 8,
    "sin": 4,
    "cos": 4,
    "gelu": 8,
    "silu": 5,
    "mish": 8,
    "softplus": 5,
    "elu": 4,
    "selu": 4,
    "celu": 4,
    "hardtanh": 2,
    "hardswish": 4,
    "hardsigmoid": 3,
    "leaky_relu": 2,
    "logit": 4,
    "clamp": 2,
    "clamp_min": 1,
    "clamp_max": 1,
    "pow": 4,
    "square": 1,
    "nan_to_num": 1,
    "bitwise_not": 1,
    "logical_not": 1,
    "isnan": 1,
    "isinf": 1,
    "fill": 0,
    "zero": 0,
    "threshold": 1,
    "rrelu_with_noise": 2,
    "prelu": 2,
    "sgn": 1,
    "trunc": 1,
    "frac": 1,
    "lerp": 3,
    "addcmul": 2,
    "addcdiv": 2,
    "where": 1,
    "masked_fill": 1,
    "tril": 1,
    "triu": 1,
}
_BINARY = {
    "add": 1,
    "sub": 1,
    "rsub": 1,
    "mul": 1,
    "div": 1,
    "remainder": 2,
    "fmod": 2,
    "maximum": 1,
    "minimum": 1,
    "eq": 1,
    "ne": 1,
    "lt": 1,
    "le": 1,
    "gt": 1,
    "ge": 1,
    "logical_and": 1,
    "logical_or": 1,
    "logical_xor": 1,
    "bitwise_and": 1,
    "bitwise_or": 1,
    "bitwise_xor": 1,
    "atan2": 8,
    "polar": 10,  # abs x (cos, sin) of the angle: rotary tables built as complex numbers
    "floor_divide": 2,
    "hypot": 4,
    "copysign": 1,
    "xlogy": 4,
    "threshold_backward": 1,
    "gelu_backward": 10,
    "silu_backward": 6,
    "sigmoid_backward": 3,
    "tanh_backward": 3,
    "hardswish_backward": 4,
    "hardsigmoid_backward": 2,
    "hardtanh_backward": 2,
    "leaky_relu_backward": 2,
    "elu_backward": 4,
    "mish_backward": 10,
    "softplus_backward": 6,
    "logit_backward": 4,
    "masked_scatter": 1,
    "clamp_backward": 1,
}
_KINDS = {**_UNARY, **_BINARY}


for _name, _flops in _KINDS.items():
    register(
        *existing(f"aten.{_name}", f"aten.{_name}_"), category=_ELEMENTWISE, family="elementwise"
    )(elementwise(_flops))

# reads x, writes the output and a one-byte mask per element
register(aten.native_dropout, category=_ELEMENTWISE, family="dropout")(
    memory_bound(flops=lambda e: 2 * first(e).numel, read=lambda e: first(e).nbytes)
)
register(aten.native_dropout_backward, category=_ELEMENTWISE, family="elementwise")(elementwise(1))


@register(
    *aten_ops(
        """
        bernoulli bernoulli_ uniform_ normal_ rand_like randn_like rand randn randint
        exponential_
        """
    ),
    category=_ELEMENTWISE,
    family="random",
)
def random(e: OpEvent, ctx: CostContext) -> Cost:
    x = first(e)
    written = out_bytes(e) or (x.nbytes if x else 0)
    return Cost(flops=4 * written, bytes_written=written)
