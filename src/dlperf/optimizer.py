"""Optimizers: the one table of their states and work, and the step's cost.

The optimizer step is costed from the parameters (it is not traced). Each
optimizer streams its parameters, gradients and states once per step. States
are kept in the weights' storage dtype (fp32 master weights under fp32 and
mixed precision, half precision when the policy trains in fp16/bf16
throughout, as `torch.optim` allocates them with `zeros_like(param)`), except
8-bit Adam's, which are one byte each. A fused or multi-tensor implementation
launches about one kernel per 64 parameter tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import DlperfError, close_matches
from .kinds import Category, Phase
from .ops import Cost, Costed
from .tracing import OpEvent, Trace


@dataclass(frozen=True)
class Optimizer:
    name: str
    # Full-size state tensors per parameter (moments); 0 for plain SGD.
    states: int
    # FLOPs per parameter per step.
    flops_per_param: int
    # Bytes per state element, or None for the weights' storage dtype.
    state_itemsize: int | None = None
    # Adafactor: the second moment kept factored (row and column statistics).
    factored: bool = False


OPTIMIZERS = {
    o.name: o
    for o in (
        Optimizer("adamw", states=2, flops_per_param=12),
        Optimizer("adam", states=2, flops_per_param=12),
        Optimizer("sgd", states=0, flops_per_param=2),
        Optimizer("sgd-momentum", states=1, flops_per_param=4),
        Optimizer("adam8bit", states=2, flops_per_param=14, state_itemsize=1),
        Optimizer("adafactor", states=0, flops_per_param=14, factored=True),
    )
}
TENSORS_PER_KERNEL = 64


def get_optimizer(name: str) -> Optimizer:
    if name not in OPTIMIZERS:
        raise DlperfError(f"unknown optimizer {name!r}; {close_matches(name, OPTIMIZERS)}")
    return OPTIMIZERS[name]


def factored_state_elements(shape: tuple[int, ...]) -> int:
    """Elements of Adafactor's factored second moment for one parameter.

    A tensor of two or more dimensions keeps a row statistic over its last
    dimension (shape[:-1]) and a column statistic over the one before
    (shape[:-2] + shape[-1:]); a vector keeps its full second moment.
    """
    if len(shape) < 2:
        return math.prod(shape)
    return math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]


def state_bytes(name: str, params: int, shapes: list[tuple[int, ...]], word_bytes: int = 4) -> int:
    """Bytes of optimizer state for `params` parameters of the given shapes,
    with weights stored in `word_bytes` per element."""
    opt = get_optimizer(name)
    itemsize = opt.state_itemsize or word_bytes
    if opt.factored:
        return itemsize * sum(factored_state_elements(s) for s in shapes)
    return itemsize * opt.states * params


def optimizer_cost(trace: Trace, name: str) -> tuple[OpEvent, Costed]:
    """The step of optimizer `name` over the trace's parameters, as one event and its cost."""
    opt = get_optimizer(name)
    word = trace.precision.master_weight_bytes
    n = trace.trainable_params
    states = state_bytes(name, n, trace.param_shapes, word)
    read = n * 2 * word + states  # weights, gradients, states
    written = n * word + states  # weights, states
    kernels = max(1, -(-len(trace.param_shapes) // TENSORS_PER_KERNEL))
    event = OpEvent(
        op=f"optimizer.{name}",
        args=(),
        kwargs={},
        outputs=(),
        module="(optimizer)",
        phase=Phase.OPTIMIZER,
        info={"params": n},
    )
    cost = Cost(
        flops=opt.flops_per_param * n, bytes_read=read, bytes_written=written, kernels=kernels
    )
    return event, Costed(cost, Category.OTHER, "optimizer")
