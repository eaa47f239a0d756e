"""The optimizer step, costed from the parameters (it is not traced).

Each optimizer streams its parameters, gradients and states once per step:
bytes read and written per parameter, with fp32 master weights, gradients and
states (the seeds' memory table) unless the precision policy keeps weights
in half precision throughout. A fused or multi-tensor implementation
launches about one kernel per 64 parameter tensors.
"""

from __future__ import annotations

import torch

from .errors import DlperfError
from .ops import Cost
from .tracing import OpEvent, Trace

# (states per parameter, FLOPs per parameter)
OPTIMIZERS = {
    "adamw": (2, 12),
    "adam": (2, 12),
    "sgd": (0, 2),
    "sgd-momentum": (1, 4),
    "adam8bit": (2, 14),
    "adafactor": (1, 14),
}
TENSORS_PER_KERNEL = 64


def optimizer_cost(trace: Trace, name: str) -> tuple[OpEvent, Cost]:
    if name not in OPTIMIZERS:
        raise DlperfError(f"unknown optimizer {name!r}; choose from: {', '.join(OPTIMIZERS)}")
    states, flops = OPTIMIZERS[name]
    half = trace.precision.param_dtype in (torch.float16, torch.bfloat16)
    word = 2 if half else 4
    state_bytes = 1 if name == "adam8bit" else word
    n = trace.trainable_params
    if name == "adafactor":  # factored second moment: rows + columns per matrix
        factored = sum((s[0] + s[-1]) if len(s) >= 2 else s[0] for s in trace.param_shapes)
        read = n * (2 * word) + factored * word
        written = n * word + factored * word
    else:
        read = n * (2 * word + states * state_bytes)  # weights, gradients, states
        written = n * (word + states * state_bytes)  # weights, states
    kernels = max(1, -(-len(trace.param_shapes) // TENSORS_PER_KERNEL))
    event = OpEvent(
        op=f"optimizer.{name}",
        args=(),
        kwargs={},
        outputs=(),
        module="(optimizer)",
        phase="optimizer",
        info={"params": n},
    )
    cost = Cost(
        flops=flops * n,
        bytes_read=read,
        bytes_written=written,
        category="other",
        family="optimizer",
        kernels=kernels,
    )
    return event, cost
