"""Element-wise ops, made by one factory: each reads its tensor inputs once
and writes its output once, doing a few FLOPs per output element.

Inputs smaller than the output (a broadcast bias, a scalar tensor) are read
once: the cache serves their reuse. Dropout writes its mask too.
"""

from __future__ import annotations

from ..tracing import OpEvent
from . import Cost, CostContext, existing, register, tensor_args

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


def _elementwise(e: OpEvent, ctx: CostContext) -> Cost:
    name = e.packet.split(".", 1)[1].rstrip("_")
    per_element = _KINDS.get(name, _KINDS.get(name.split("_backward")[0], 1))
    out = e.outputs[0] if e.outputs else None
    if out is None:  # in-place: the first argument is the output
        ts = tensor_args(e)
        out = ts[0] if ts else None
    if out is None:
        return Cost(category="elementwise", family="elementwise")
    read = sum(t.nbytes for t in e.tensors())
    return Cost(
        flops=per_element * out.numel,
        bytes_read=read,
        bytes_written=out.nbytes,
        category="elementwise",
        family="elementwise",
    )


for _name in _KINDS:
    register(*existing(f"aten.{_name}", f"aten.{_name}_"))(_elementwise)


@register("aten.native_dropout")
def dropout(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0]
    # reads x, writes the output and a one-byte mask per element
    written = sum(t.nbytes for t in e.outputs)
    return Cost(
        flops=2 * x.numel,
        bytes_read=x.nbytes,
        bytes_written=written,
        category="elementwise",
        family="dropout",
    )


@register("aten.native_dropout_backward")
def dropout_backward(e: OpEvent, ctx: CostContext) -> Cost:
    return _elementwise(e, ctx)


@register(
    "aten.bernoulli",
    "aten.bernoulli_",
    "aten.uniform_",
    "aten.normal_",
    "aten.rand_like",
    "aten.randn_like",
    "aten.rand",
    "aten.randn",
    "aten.randint",
    "aten.exponential_",
)
def random(e: OpEvent, ctx: CostContext) -> Cost:
    written = sum(t.nbytes for t in e.outputs) or sum(t.nbytes for t in tensor_args(e)[:1])
    return Cost(flops=4 * written, bytes_written=written, category="elementwise", family="random")
