"""Optimizers: the one table of their states, their work, and how PyTorch runs them.

The optimizer step is costed from the parameters (it is not traced). States
are kept in the weights' storage dtype (fp32 master weights under fp32 and
mixed precision, half precision when the policy trains in fp16/bf16
throughout, as `torch.optim` allocates them with `zeros_like(param)`), except
8-bit Adam's, which are one byte each.

Each optimizer's update is written as the element-wise passes its
implementation runs over every parameter (`Pass`: the full-size tensors it
reads and writes), in one of three styles:

- "foreach": torch.optim's default on CUDA (`_multi_tensor_*`). Each pass is
  one `torch._foreach_*` call, one host op, whose multi-tensor kernel is
  launched again whenever its argument block fills: every `CHUNK_ELEMENTS`
  elements of a tensor take one thread block, and a launch holds at most
  `max_tensors[depth]` tensors and `max_blocks` blocks (PyTorch's
  `MultiTensorApply.cuh`, the 32 KB argument tables of CUDA 12.1+ on Volta
  and later, the 4 KB ones before Volta). On a CPU torch.optim runs the same
  passes tensor by tensor (`_single_tensor_*`, foreach is CUDA-only).
- "fused": one kernel for the whole update (`fused=True`: `_fused_adamw_`,
  depth 4), chunked the same way, plus the step counters' `_foreach_add_`.
- "per-tensor": a Python loop over the parameters issuing every pass as its
  own op and kernel (Hugging Face's old `adamw_hf` and `Adafactor`,
  bitsandbytes' 8-bit Adam with one fused kernel per tensor).

Traffic is the sum of the passes' bytes, so a foreach AdamW moves its
parameters, gradients and states several times where the fused kernel moves
them once. The step's event says its kernels (`Cost.kernels`) and its
framework calls (`info["host_ops"]`), which `host.issue_timeline` charges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .errors import DlperfError, close_matches
from .kernels.attention import torch_version
from .kinds import Category, Phase
from .ops import Cost, Costed
from .tracing import OpEvent, Trace

# PyTorch's MultiTensorApply.cuh: elements per thread block, and per launch the
# most tensors (by depth, the number of tensor lists) and blocks.
CHUNK_ELEMENTS = 65536
_LIMITS = {
    # CUDA 12.1+ with 32 KB kernel arguments, compute capability 7.0 and later
    True: {"tensors": (770, 448, 336, 252, 210), "scalar_list": (672, 448, 336, 252, 210),
           "blocks": 2240},
    # 4 KB kernel arguments (before Volta)
    False: {"tensors": (110, 64, 48, 36, 30), "scalar_list": (96, 64, 48, 36, 30),
            "blocks": 320},
}  # fmt: skip
_PRE_VOLTA = {"maxwell", "pascal"}


class Pass(NamedTuple):
    """One element-wise pass over the parameters. `reads` and `writes` name the
    full-size tensors it moves, one letter each: p (parameter), g (gradient),
    s (a state), t (a temporary the size of the parameter); small tensors (a
    norm, Adafactor's row and column statistics) are not written. `depth` is
    the number of tensor lists of its multi-tensor kernel, `scalar_list`
    whether it takes one scalar per tensor (smaller launches)."""

    reads: str
    writes: str
    depth: int = 1
    scalar_list: bool = False


@dataclass(frozen=True)
class Optimizer:
    name: str
    # Full-size state tensors per parameter (moments); 0 for plain SGD.
    states: int
    # FLOPs per parameter per step.
    flops_per_param: int
    # How the implementation runs: "foreach", "fused" or "per-tensor" (module doc).
    style: str
    # The passes of the update (of a matrix, when `factored`).
    update: tuple[Pass, ...]
    # Bytes per state element, or None for the weights' storage dtype.
    state_itemsize: int | None = None
    # Adafactor: the second moment kept factored (row and column statistics);
    # vectors keep it whole and run `vector_update`.
    factored: bool = False
    vector_update: tuple[Pass, ...] = ()


def _adam_foreach(weight_decay: bool) -> tuple[Pass, ...]:
    # torch.optim's _multi_tensor_adam with capturable=False: the step counters
    # stay on the CPU (no kernel), the bias corrections are Python floats.
    decay = (Pass("p", "p"),) if weight_decay else ()  # _foreach_mul_(params, 1 - lr*wd)
    return (
        *decay,
        Pass("sg", "s", 2),  # _foreach_lerp_(exp_avgs, grads, 1 - beta1)
        Pass("s", "s"),  # _foreach_mul_(exp_avg_sqs, beta2)
        Pass("sg", "s", 3),  # _foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        Pass("s", "t", 2),  # _foreach_sqrt(exp_avg_sqs)
        Pass("t", "t", 1, True),  # _foreach_div_(sqrt, bias_correction2_sqrt)
        Pass("t", "t"),  # _foreach_add_(sqrt, eps)
        Pass("pst", "p", 3, True),  # _foreach_addcdiv_(params, exp_avgs, sqrt, step_size)
    )


_ADAMW_FUSED = (Pass("pgss", "pss", 4),)  # _fused_adamw_(params, grads, exp_avgs, exp_avg_sqs)
# transformers.AdamW (`adamw_hf`), weight decay 0 as the Trainer defaults.
_ADAMW_HF = (
    Pass("s", "s"),  # exp_avg.mul_(beta1)
    Pass("sg", "s"),  # .add_(grad, alpha=1 - beta1)
    Pass("s", "s"),  # exp_avg_sq.mul_(beta2)
    Pass("sg", "s"),  # .addcmul_(grad, grad, value=1 - beta2)
    Pass("s", "t"),  # denom = exp_avg_sq.sqrt()
    Pass("t", "t"),  # .add_(eps)
    Pass("pst", "p"),  # p.addcdiv_(exp_avg, denom, value=-step_size)
)
# transformers.Adafactor as the Trainer builds it (scale_parameter=False,
# relative_step=False, no first moment, no weight decay); a norm is two ops
# (_rms: norm, then divide by sqrt(numel)).
_RMS_OF_PARAM = (Pass("p", ""), Pass("", ""))
_RMS_OF_UPDATE = (Pass("t", ""), Pass("", ""))
_ADAFACTOR_HEAD = (*_RMS_OF_PARAM, Pass("g", "t"), Pass("t", "t"))  # RMS(p); grad**2 + eps
_ADAFACTOR_TAIL = (
    Pass("tg", "t"),  # update.mul_(grad)
    *_RMS_OF_UPDATE,
    Pass("", ""),  # / clip_threshold
    Pass("", ""),  # .clamp_(min=1)
    Pass("t", "t"),  # update.div_(...)
    Pass("t", "t"),  # update.mul_(lr)
    Pass("t", "t"),  # -update
    Pass("pt", "p"),  # p.add_(-update)
)
_ADAFACTOR_MATRIX = (
    *_ADAFACTOR_HEAD,
    *(Pass("", ""), Pass("t", ""), Pass("", "")) * 2,  # row, col: mul_, mean, add_
    # _approx_sq_grad: row mean, divide, rsqrt_, column rsqrt, their outer product
    *(Pass("", ""),) * 4,
    Pass("", "t"),
    *_ADAFACTOR_TAIL,
)
_ADAFACTOR_VECTOR = (
    *_ADAFACTOR_HEAD,
    Pass("s", "s"),  # exp_avg_sq.mul_(beta2t)
    Pass("st", "s"),  # .add_(update, alpha=1 - beta2t)
    Pass("s", "t"),  # exp_avg_sq.rsqrt(), then .mul_(grad) in the tail
    *_ADAFACTOR_TAIL,
)

# SGD: _foreach_add_(params, grads, alpha=-lr)
_SGD = (Pass("pg", "p", 2),)
# _foreach_mul_(bufs, momentum); _foreach_add_(bufs, grads); _foreach_add_(params, bufs)
_SGD_MOMENTUM = (Pass("s", "s"), Pass("sg", "s", 2), Pass("ps", "p", 2))
# bitsandbytes: one 8-bit blockwise update kernel per tensor
_ADAM_8BIT = (Pass("pgss", "pss", 4),)

OPTIMIZERS = {
    o.name: o
    for o in (
        Optimizer("adamw", 2, 12, "foreach", _adam_foreach(weight_decay=True)),
        Optimizer("adam", 2, 12, "foreach", _adam_foreach(weight_decay=False)),
        Optimizer("adamw-fused", 2, 12, "fused", _ADAMW_FUSED),
        Optimizer("adamw-hf", 2, 12, "per-tensor", _ADAMW_HF),
        Optimizer("sgd", 0, 2, "foreach", _SGD),
        Optimizer("sgd-momentum", 1, 4, "foreach", _SGD_MOMENTUM),
        Optimizer("adam8bit", 2, 14, "per-tensor", _ADAM_8BIT, state_itemsize=1),
        Optimizer(
            "adafactor",
            0,
            14,
            "per-tensor",
            _ADAFACTOR_MATRIX,
            factored=True,
            vector_update=_ADAFACTOR_VECTOR,
        ),  # fmt: skip
    )
}


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


def multi_tensor_launches(
    numels: list[int], depth: int, scalar_list: bool = False, large_kernel_args: bool = True
) -> int:
    """Kernel launches of one multi-tensor (foreach or fused) op over tensors of
    `numels` elements, as PyTorch's `multi_tensor_apply` splits them: a launch
    whenever its blocks (one per CHUNK_ELEMENTS of a tensor) or its tensors fill
    up, and one for what is left. A tensor cut by a full launch carries on in
    the next one. Empty tensors are skipped."""
    limits = _LIMITS[large_kernel_args]
    max_tensors = limits["scalar_list" if scalar_list else "tensors"][depth - 1]
    max_blocks = limits["blocks"]
    launches = tensors = blocks = 0
    for numel in numels:
        if numel <= 0:
            continue
        tensors += 1
        chunks = -(-numel // CHUNK_ELEMENTS)
        while chunks:
            room = max_blocks - blocks
            if chunks >= room:  # the blocks fill within this tensor
                launches += 1
                chunks -= room
                blocks = 0
                tensors = 1 if chunks else 0
            else:
                blocks += chunks
                chunks = 0
                if tensors == max_tensors:
                    launches += 1
                    blocks = tensors = 0
    return launches + (1 if blocks else 0)


def _style_on(opt: Optimizer, spec) -> str:
    # torch.optim picks foreach only when every parameter is on CUDA, and by
    # default only from PyTorch 2.0 (before, its loop over the parameters)
    on_loop = spec is not None and (spec.kind == "cpu" or not _foreach_by_default(spec))
    return "per-tensor" if opt.style == "foreach" and on_loop else opt.style


def step_style(name: str, spec=None) -> str:
    """How optimizer `name` runs on `spec`: "fused", "foreach" or "per-tensor"."""
    return _style_on(get_optimizer(name), spec)


def step_launches(name: str, shapes: list[tuple[int, ...]], spec=None) -> tuple[int, int]:
    """(kernels, framework calls) of one step of optimizer `name` over
    parameters of `shapes` on `spec` (None: a CUDA GPU of Volta or later)."""
    opt = get_optimizer(name)
    numels = [math.prod(s) for s in shapes]
    tensors = sum(1 for n in numels if n > 0)
    style = _style_on(opt, spec)
    large = spec is None or spec.architecture not in _PRE_VOLTA
    if style == "per-tensor":
        vectors = sum(1 for s, n in zip(shapes, numels, strict=True) if n > 0 and len(s) < 2)
        matrices = tensors - vectors if opt.factored else tensors
        kernels = len(opt.update) * matrices + len(opt.vector_update) * (tensors - matrices)
        return kernels, kernels
    if spec is not None and spec.kind == "cpu":  # fused on a CPU: a C++ loop over the tensors
        return tensors, 1
    kernels = sum(multi_tensor_launches(numels, p.depth, p.scalar_list, large) for p in opt.update)
    if style == "fused":  # the step counters live on the GPU: _foreach_add_(steps, 1)
        kernels += multi_tensor_launches([1] * tensors, 1, False, large)
        return kernels, len(opt.update) + 1
    return kernels, len(opt.update)


def _traffic(passes: tuple[Pass, ...], elements: float, word: int, state: int):
    size = {"p": word, "g": word, "t": word, "s": state}
    read = sum(size[c] for p in passes for c in p.reads) * elements
    written = sum(size[c] for p in passes for c in p.writes) * elements
    return read, written


def step_traffic(name: str, params: int, shapes: list[tuple[int, ...]], word: int):
    """(bytes read, bytes written) of one step over `params` trainable
    parameters of `shapes`, weights, gradients and temporaries in `word` bytes."""
    opt = get_optimizer(name)
    state = opt.state_itemsize or word
    if not opt.factored:
        return _traffic(opt.update, params, word, state)
    numels = [math.prod(s) for s in shapes]
    vector_numel = sum(n for s, n in zip(shapes, numels, strict=True) if len(s) < 2)
    vector = params * vector_numel / max(1, sum(numels))  # the vectors' share of the elements
    mr, mw = _traffic(opt.update, params - vector, word, state)
    vr, vw = _traffic(opt.vector_update, vector, word, state)
    return mr + vr, mw + vw


def _step_event(op: str, **info) -> OpEvent:
    """An event of the optimizer phase (no tensors traced: it is costed from the
    parameters)."""
    return OpEvent(
        op=op, args=(), kwargs={}, outputs=(), module="(optimizer)", phase=Phase.OPTIMIZER,
        info=info,
    )  # fmt: skip


def optimizer_cost(trace: Trace, name: str, spec=None) -> tuple[OpEvent, Costed]:
    """The step of optimizer `name` over the trace's parameters on `spec`
    (None: a CUDA GPU of Volta or later), as one event and its cost."""
    opt = get_optimizer(name)
    word = trace.precision.master_weight_bytes
    n = trace.trainable_params
    read, written = step_traffic(name, n, trace.trained_shapes, word)
    kernels, host_ops = step_launches(name, trace.trained_shapes, spec) if n else (0, 0)
    event = _step_event(
        f"optimizer.{name}", params=n, host_ops=host_ops, style=_style_on(opt, spec)
    )
    cost = Cost(
        flops=opt.flops_per_param * n, bytes_read=read, bytes_written=written, kernels=kernels
    )
    return event, Costed(cost, Category.OTHER, "optimizer")


def uses_loss_scaling(trace: Trace) -> bool:
    """Whether the step runs torch.amp's GradScaler: fp16 autocast training
    (bf16 keeps fp32's exponent range and needs no loss scaling)."""
    return trace.training and trace.precision.autocast_dtype == torch.float16


def grad_scaler_cost(trace: Trace) -> tuple[OpEvent, Costed]:
    """GradScaler's unscale before the optimizer step: one multi-tensor pass that
    checks every gradient for inf/NaN and divides it by the scale, in place
    (`_amp_foreach_non_finite_check_and_unscale_`), then the scale's update.
    Its step then reads the inf flag on the host (`.item()`): the host waits
    for the GPU there, so the optimizer's launches cannot run ahead of backward
    (`host_sync`)."""
    n = trace.trainable_params
    grad = trace.precision.grad_bytes
    numels = [math.prod(s) for s in trace.trained_shapes]
    kernels = multi_tensor_launches(numels, depth=1) + 1  # + _amp_update_scale_
    event = _step_event("amp.grad_scaler", params=n, host_ops=3, host_sync=True)
    cost = Cost(flops=2 * n, bytes_read=n * grad, bytes_written=n * grad, kernels=kernels)
    return event, Costed(cost, Category.OTHER, "optimizer")


# torch.optim and torch.nn.utils.clip_grad_norm_ run their passes as one
# multi-tensor op each by default from PyTorch 2.0; before, as a Python loop of
# one op per parameter and pass.
FOREACH_SINCE = (2, 0)
# The ops between the passes: stack the norms, their norm, + eps, max_norm / it, clamp.
_CLIP_SCALARS = 5


def _torch_since(spec, version: tuple[int, int]) -> bool:
    """Whether the spec's PyTorch (`--torch-version`, else the installed one)
    is `version` or later."""
    return torch_version(spec)[:2] >= version


def _foreach_by_default(spec) -> bool:
    """Whether the spec's PyTorch runs optimizers and clipping as foreach ops
    unless told otherwise."""
    return _torch_since(spec, FOREACH_SINCE)


# nn.Module.zero_grad and Optimizer.zero_grad set the gradients to None by
# default from PyTorch 2.0 (nothing runs on the device); before, they zero each
# gradient in place, one op per parameter (pytorch/pytorch#92731).
SET_TO_NONE_SINCE = (2, 0)


def zero_grad_cost(trace: Trace, spec=None) -> tuple[OpEvent, Costed] | None:
    """`zero_grad()` once per optimizer step, as the run's PyTorch does it by
    default (`--torch-version`): before 2.0, a loop that zeroes each gradient
    in place (a fill kernel writing it, and a framework call, per parameter);
    None from 2.0, where the gradients are dropped instead."""
    n = trace.trainable_params
    if not n or _torch_since(spec, SET_TO_NONE_SINCE):
        return None
    tensors = sum(1 for s in trace.trained_shapes if math.prod(s) > 0)
    event = _step_event("zero_grad", params=n, host_ops=tensors, style="per-tensor")
    cost = Cost(flops=0, bytes_read=0, bytes_written=n * trace.precision.grad_bytes,
                kernels=tensors)  # fmt: skip
    return event, Costed(cost, Category.OTHER, "optimizer")


def clip_style(spec=None) -> str:
    """How `clip_grad_norm_` runs: "foreach" or "per-tensor" (`_foreach_by_default`)."""
    return "foreach" if _foreach_by_default(spec) else "per-tensor"


def clip_grad_cost(trace: Trace, spec=None) -> tuple[OpEvent, Costed]:
    """`torch.nn.utils.clip_grad_norm_` before the optimizer step, as Hugging
    Face's Trainer, torchtitan and Megatron-LM run it by default: every
    gradient's norm (one read), the total norm and the clip coefficient from
    them, and every gradient multiplied by it in place (a read and a write).
    No `.item()`: the coefficient is clamped on the device, so the host does
    not wait."""
    n = trace.trainable_params
    grad = trace.precision.grad_bytes
    numels = [math.prod(s) for s in trace.trained_shapes]
    tensors = sum(1 for x in numels if x > 0)
    style = clip_style(spec)
    if style == "per-tensor":  # torch.norm(g) per gradient, then g.mul_(coef) per gradient
        kernels = host_ops = 2 * tensors + _CLIP_SCALARS
    elif spec is not None and spec.kind == "cpu":  # each foreach op a C++ loop over them
        kernels, host_ops = 2 * tensors + _CLIP_SCALARS, 2 + _CLIP_SCALARS
    else:  # _foreach_norm (and its per-tensor finishing kernel), _foreach_mul_
        launches = multi_tensor_launches(numels, depth=1)
        kernels, host_ops = 2 * launches + 1 + _CLIP_SCALARS, 2 + _CLIP_SCALARS
    event = _step_event("clip_grad_norm", params=n, host_ops=host_ops if n else 0, style=style)
    cost = Cost(
        flops=3 * n, bytes_read=2 * n * grad, bytes_written=n * grad, kernels=kernels if n else 0
    )
    return event, Costed(cost, Category.OTHER, "optimizer")
