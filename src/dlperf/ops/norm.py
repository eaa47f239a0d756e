"""Normalizations and softmax: memory-bound, priced by the passes they make.

A pass reads (or writes) the whole tensor once. Batch norm in training
makes one read pass when cuDNN's persistent (single-pass) kernel applies, and
two otherwise (statistics, then normalize): seed 000, chapter 3. The
persistent kernel needs the tensor to fit on chip: we take the register
files of all SMs (256 KiB each on Volta and later) as that capacity.
Softmax and layer norm rows that fit on chip are read once; longer rows are
read again per pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..tracing import OpEvent
from . import Cost, CostContext, in_bytes, out_bytes, register, tensor_args

CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")


def _load_calibration() -> dict:
    with open(CALIBRATION_FILE, "rb") as f:
        return tomllib.load(f)


ON_CHIP_BYTES_PER_SM = 256 * 1024
# A row longer than this many bytes no longer stays in one block's shared
# memory and registers: the kernel reads it once per pass.
ROW_ON_CHIP_BYTES = 48 * 1024
# Effective reads of the input per call when rows fit on chip: PyTorch's row
# kernels (statistics, then normalize) get part of the second read from DRAM.
# Fitted on the NeuSight and LLMCompass measurements by bench/calibrate.py,
# which writes them to calibration.toml beside this file.
_FITTED = _load_calibration()
LAYER_NORM_READS = float(_FITTED["layer_norm_reads"])
SOFTMAX_READS = float(_FITTED["softmax_reads"])
FLOPS_PER_ELEMENT = {"batch_norm": 8, "layer_norm": 8, "group_norm": 8, "softmax": 5, "rms": 5}


def _persistent(ctx: CostContext, nbytes: int) -> bool:
    return nbytes <= ctx.spec.sm_count * ON_CHIP_BYTES_PER_SM


def _norm_cost(e: OpEvent, kind: str, extra_reads: float, persistent: bool) -> Cost:
    x = tensor_args(e)[0]
    passes = 1 if persistent else 1 + extra_reads
    read = in_bytes(e) + (passes - 1) * x.nbytes
    note = "single pass (persistent)" if persistent else f"{passes:.3g} read passes"
    return Cost(
        flops=FLOPS_PER_ELEMENT[kind] * x.numel,
        bytes_read=read,
        bytes_written=out_bytes(e),
        category="normalization",
        family=kind,
        notes=(note,),
    )


@register(
    "aten.native_batch_norm",
    "aten._native_batch_norm_legit",
    "aten._native_batch_norm_legit_no_training",
    "aten.cudnn_batch_norm",
    "aten.miopen_batch_norm",
    "aten._batch_norm_with_update",
    "aten._batch_norm_no_update",
    "aten.batch_norm_update_stats",
)
def batch_norm(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0]
    flag = e.args[5] if len(e.args) > 5 else None
    training = flag if isinstance(flag, bool) else "with_update" in e.op
    if "no_training" in e.op or "no_update" in e.op:
        training = False
    if not training:
        return _norm_cost(e, "batch_norm", 0, True)
    return _norm_cost(e, "batch_norm", 1, _persistent(ctx, x.nbytes))


@register(
    "aten.native_batch_norm_backward",
    "aten.cudnn_batch_norm_backward",
    "aten.batch_norm_backward",
    "aten.miopen_batch_norm_backward",
)
def batch_norm_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad = tensor_args(e)[0]
    # Statistics of the gradient, then the elementwise pass: x and grad twice.
    persistent = _persistent(ctx, 2 * grad.nbytes)
    passes = 1 if persistent else 2
    read = in_bytes(e) + (passes - 1) * 2 * grad.nbytes
    note = "single pass (persistent)" if persistent else "two read passes"
    return Cost(
        flops=10 * grad.numel,
        bytes_read=read,
        bytes_written=out_bytes(e),
        category="normalization",
        family="batch_norm",
        notes=(note,),
    )


def _row_passes(e: OpEvent, row_elements: int, on_chip: float, passes_if_long: int) -> float:
    x = tensor_args(e)[0]
    return on_chip if row_elements * x.itemsize <= ROW_ON_CHIP_BYTES else passes_if_long


@register(
    "aten.native_layer_norm", "aten.native_group_norm", "aten._fused_rms_norm", "aten.rms_norm"
)
def layer_norm(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0]
    if "group_norm" in e.op:
        n, groups = x.shape[0], e.args[6] if len(e.args) > 6 else 1
        row = x.numel // max(1, n * int(groups))
        kind = "group_norm"
    else:
        shape = e.args[1] if isinstance(e.args[1], (list, tuple)) else [x.shape[-1]]
        row = 1
        for s in shape:
            row *= int(s)
        kind = "rms" if "rms" in e.op else "layer_norm"
    passes = _row_passes(e, row, LAYER_NORM_READS, 2)
    return _norm_cost(e, kind, passes - 1, False)


@register(
    "aten.native_layer_norm_backward",
    "aten.native_group_norm_backward",
    "aten._fused_rms_norm_backward",
)
def layer_norm_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad = tensor_args(e)[0]
    read = in_bytes(e)
    # Weight and bias gradients reduce over rows: a second read of grad and x.
    read += 2 * grad.nbytes
    return Cost(
        flops=12 * grad.numel,
        bytes_read=read,
        bytes_written=out_bytes(e),
        category="normalization",
        family="layer_norm",
    )


@register("aten._softmax", "aten._log_softmax", "aten._safe_softmax")
def softmax(e: OpEvent, ctx: CostContext) -> Cost:
    x = tensor_args(e)[0]
    dim = e.args[1] if len(e.args) > 1 and isinstance(e.args[1], int) else -1
    row = x.shape[dim] if x.shape else 1
    passes = _row_passes(e, row, SOFTMAX_READS, 3)  # max, sum of exponentials, normalize
    return Cost(
        flops=FLOPS_PER_ELEMENT["softmax"] * x.numel,
        bytes_read=x.nbytes * passes,
        bytes_written=out_bytes(e),
        category="normalization",
        family="softmax",
        notes=(f"{passes:.3g} read passes",),
    )


@register("aten._softmax_backward_data", "aten._log_softmax_backward_data")
def softmax_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad, out = tensor_args(e)[:2]
    row = grad.shape[e.args[2]] if len(e.args) > 2 and isinstance(e.args[2], int) else 1
    passes = _row_passes(e, row, SOFTMAX_READS, 2)
    return Cost(
        flops=4 * grad.numel,
        bytes_read=(grad.nbytes + out.nbytes) * passes,
        bytes_written=out_bytes(e),
        category="normalization",
        family="softmax",
    )
