"""Normalizations and softmax: memory-bound, priced by the passes they make.

A pass reads (or writes) the whole tensor once. Batch norm in training
makes one read pass when cuDNN's persistent (single-pass) kernel applies, and
two otherwise (statistics, then normalize): seed 000, chapter 3. The
persistent kernel needs the tensor to fit on chip, which only the device
knows: the handlers give the re-read bytes and the working set as hints, and
the pricing compares them with the spec's on-chip capacity.
Softmax and layer norm rows that fit on chip are read once; longer rows are
read again per pass.
"""

from __future__ import annotations

import sys
from math import prod
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import torch

from ..kinds import Category
from ..tracing import OpEvent
from ..tracing.losses import CROSS_ENTROPY_BACKWARD_OP, CROSS_ENTROPY_OP
from .cost import Cost, CostContext, Costed, noted
from .factories import first, in_bytes, memory_bound, out_bytes, tensor_args
from .registry import aten_ops, register

aten = torch.ops.aten
_NORM = Category.NORMALIZATION
CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")


def _load_calibration() -> dict:
    with open(CALIBRATION_FILE, "rb") as f:
        return tomllib.load(f)


# A row longer than this many bytes no longer stays in one block's shared
# memory and registers (PyTorch's row kernels): the kernel reads it once per pass.
ROW_ON_CHIP_BYTES = 48 * 1024
# Effective reads of the input per call when rows fit on chip: PyTorch's row
# kernels (statistics, then normalize) get part of the second read from DRAM.
# Fitted on the NeuSight and LLMCompass measurements by bench/calibrate.py,
# which writes them to calibration.toml beside this file.
_FITTED = _load_calibration()
LAYER_NORM_READS = float(_FITTED["layer_norm_reads"])
SOFTMAX_READS = float(_FITTED["softmax_reads"])
FLOPS_PER_ELEMENT = {"batch_norm": 8, "layer_norm": 8, "group_norm": 8, "softmax": 5, "rms": 5}


@register(
    *aten_ops(
        """
        native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training
        cudnn_batch_norm miopen_batch_norm _batch_norm_with_update _batch_norm_no_update
        batch_norm_update_stats
        """
    ),
    category=_NORM,
    family="batch_norm",
)
def batch_norm(e: OpEvent, ctx: CostContext) -> Cost:
    x = first(e)
    flag = e.args[5] if len(e.args) > 5 else None
    training = flag if isinstance(flag, bool) else "with_update" in e.op
    if "no_training" in e.op or "no_update" in e.op:
        training = False
    # Training: statistics, then normalize: x is read again unless it fits on
    # chip. Inference uses the running statistics: one pass.
    again = x.nbytes if training else 0
    return Cost(
        flops=FLOPS_PER_ELEMENT["batch_norm"] * x.numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        reread_bytes=again,
        working_set_bytes=again,
    )


@register(
    *aten_ops(
        """
        native_batch_norm_backward cudnn_batch_norm_backward batch_norm_backward
        miopen_batch_norm_backward
        """
    ),
    category=_NORM,
    family="batch_norm",
)
def batch_norm_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad = first(e)
    # Statistics of the gradient, then the elementwise pass: x and grad read
    # again unless both fit on chip.
    both = 2 * grad.nbytes
    return Cost(
        flops=10 * grad.numel,
        bytes_read=in_bytes(e),
        bytes_written=out_bytes(e),
        reread_bytes=both,
        working_set_bytes=both,
    )


def _row_passes(e: OpEvent, row_elements: int, on_chip: float, passes_if_long: int) -> float:
    return on_chip if row_elements * first(e).itemsize <= ROW_ON_CHIP_BYTES else passes_if_long


def _row_norm(kind: str):
    """Layer, group and RMS norm: reads of x by the length of a row (what one
    block normalizes)."""

    def handler(e: OpEvent, ctx: CostContext) -> Costed:
        x = first(e)
        if kind == "group_norm":
            n, groups = x.shape[0], e.args[6] if len(e.args) > 6 else 1
            row = x.numel // max(1, n * int(groups))
        else:
            shape = e.args[1] if isinstance(e.args[1], (list, tuple)) else [x.shape[-1]]
            row = prod(int(s) for s in shape)
        passes = _row_passes(e, row, LAYER_NORM_READS, 2)
        cost = Cost(
            flops=FLOPS_PER_ELEMENT[kind] * x.numel,
            bytes_read=in_bytes(e) + (passes - 1) * x.nbytes,
            bytes_written=out_bytes(e),
        )
        return noted(cost, f"{passes:.3g} read passes")

    return handler


register(aten.native_layer_norm, category=_NORM, family="layer_norm")(_row_norm("layer_norm"))
register(aten.native_group_norm, category=_NORM, family="group_norm")(_row_norm("group_norm"))
register(aten._fused_rms_norm, aten.rms_norm, category=_NORM, family="rms")(_row_norm("rms"))


def _norm_backward_read(e: OpEvent) -> float:
    # Weight and bias gradients reduce over rows: a second read of grad and x.
    return in_bytes(e) + 2 * first(e).nbytes


register(
    aten.native_layer_norm_backward,
    aten.native_group_norm_backward,
    aten._fused_rms_norm_backward,
    category=_NORM,
    family="layer_norm",
)(memory_bound(flops=lambda e: 12 * first(e).numel, read=_norm_backward_read))


@register(aten._softmax, aten._log_softmax, aten._safe_softmax, category=_NORM, family="softmax")
def softmax(e: OpEvent, ctx: CostContext) -> Costed:
    x = first(e)
    dim = e.args[1] if len(e.args) > 1 and isinstance(e.args[1], int) else -1
    row = x.shape[dim] if x.shape else 1
    passes = _row_passes(e, row, SOFTMAX_READS, 3)  # max, sum of exponentials, normalize
    cost = Cost(
        flops=FLOPS_PER_ELEMENT["softmax"] * x.numel,
        bytes_read=x.nbytes * passes,
        bytes_written=out_bytes(e),
    )
    return noted(cost, f"{passes:.3g} read passes")


@register(
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    category=_NORM,
    family="softmax",
)
def softmax_backward(e: OpEvent, ctx: CostContext) -> Cost:
    grad, out = tensor_args(e)[:2]
    row = grad.shape[e.args[2]] if len(e.args) > 2 and isinstance(e.args[2], int) else 1
    passes = _row_passes(e, row, SOFTMAX_READS, 2)
    return Cost(
        flops=4 * grad.numel,
        bytes_read=(grad.nbytes + out.nbytes) * passes,
        bytes_written=out_bytes(e),
    )


# -- a fused cross-entropy (`tracing.losses`, --loss fused and chunked) --------
# Forward reads the (N, V) logits once (row max, sum of exponentials, the
# target's logit) and writes one fp32 log-sum-exp per row; backward reads
# them again with the log-sum-exp and writes the gradient over them.


@register(CROSS_ENTROPY_OP, category=_NORM, family="cross_entropy")
def fused_cross_entropy(e: OpEvent, ctx: CostContext) -> Cost:
    logits = first(e)
    return Cost(flops=FLOPS_PER_ELEMENT["softmax"] * logits.numel, bytes_read=in_bytes(e),
                bytes_written=out_bytes(e))  # fmt: skip


@register(CROSS_ENTROPY_BACKWARD_OP, category=_NORM, family="cross_entropy")
def fused_cross_entropy_backward(e: OpEvent, ctx: CostContext) -> Cost:
    logits = tensor_args(e)[1]
    # exp(x - lse), less one at the target, times the scale: written in place
    return Cost(flops=4 * logits.numel, bytes_read=in_bytes(e), bytes_written=logits.nbytes)
