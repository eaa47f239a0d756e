"""Inference as TensorRT runs an int8 or fp8 engine (`--infer --precision
int8`, or `fp8` with `--infer`): convolutions and linear layers as quantized
Tensor Core GEMMs, everything else in half precision.

Which ops. Every convolution that is a GEMM (a depthwise one stays a
memory-bound half-precision kernel, as TensorRT's depthwise kernels do) and
every mm/addmm of a linear layer (`linear.is_linear_module`), on operands in
the policy's half-precision dtype. No feature-count filter: TensorRT pads
channels to its int8 formats' multiples; the alignment losses of the GEMM
pricing (16 elements for int8, seed 002/003 Table 1) price what padding costs.

Per op, as TensorRT's explicit quantization (Q/DQ) runs it:
- the GEMM: int8 (or e4m3) operands, int32 (fp32) accumulation, and an
  epilogue that rescales and writes the output in half precision, 2 B per
  element, with the bias added there;
- the weight: quantized once when the engine is built, stored and read at
  1 B per element;
- the activation (the input): quantized per tensor with a scale fixed by
  calibration, so no amax pass: one memory-bound kernel that reads it at
  2 B and writes it at 1 B per element. Counted per layer: a tensor two
  layers read (a ResNet block's input, read by its first convolution and
  its downsample) is quantized once by TensorRT and twice here.
The quantize kernel writes the input in the layout the GEMM takes, so of an
NCHW convolution's layout transposes only the output's stays (`conv.py`).

With `--compile` (`fold_quantize`), TensorRT fuses the quantization into
the epilogue of the kernel that produces the activation: the separate
kernel and its 2 B read go; the 1 B write stays, now the producer's extra
output. An input no op of the pass produced (the network's own input) keeps
its quantize kernel.
"""

from __future__ import annotations

from dataclasses import replace

from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, Costed, Gemm, noted
from .linear import LINEAR_PACKETS, is_linear_gemm

# Storage of an int8 or e4m3 operand, and of the GEMM's half-precision output.
QUANTIZED_BYTES = 1
OUTPUT_BYTES = 2
# Per element of the activation quantized: read in half precision, written quantized.
QUANTIZE_READ_BYTES = 2
QUANTIZE_WRITTEN_BYTES = QUANTIZED_BYTES

FUSED_REMARK = "input quantized in its producer's epilogue"
# The remark that marks an op priced with its own quantize kernel (`fold_quantize` reads it).
QUANTIZE_REMARK = "input quantized per tensor (1 kernel)"


def gemm_dtype(ctx: CostContext, *operands: TensorMeta) -> str:
    """The quantized dtype these operands' GEMM runs in, "" where it runs as traced."""
    policy = ctx.precision
    if not policy.quantized_gemms:
        return ""
    if not all(isinstance(t, TensorMeta) and t.dtype == policy.param_dtype for t in operands):
        return ""
    return policy.quantized_gemms


def linear_dtype(e: OpEvent, ctx: CostContext) -> str:
    """The quantized dtype of a linear layer's mm/addmm, "" for any other product."""
    if not is_linear_gemm(e):
        return ""
    a, b = e.args[-2], e.args[-1]
    if not (isinstance(a, TensorMeta) and isinstance(b, TensorMeta)) or len(a.shape) != 2:
        return ""
    return gemm_dtype(ctx, a, b)


def quantized_cost(
    gemm: Gemm, activation: TensorMeta, weight: TensorMeta, out: TensorMeta, bias_bytes: int = 0
) -> Costed:
    """A quantized GEMM op: `gemm` (its dtype the quantized one) on `activation`
    and `weight` stored at 1 B, writing `out` at 2 B, with the activation's
    quantize kernel as side work."""
    operands = (activation.numel + weight.numel) * QUANTIZED_BYTES + bias_bytes
    written = out.numel * OUTPUT_BYTES
    quantize_read = QUANTIZE_READ_BYTES * activation.numel
    quantize_written = QUANTIZE_WRITTEN_BYTES * activation.numel
    gemm = replace(gemm, storage=gemm.dtype, tensor_bytes=operands + written)
    cost = Cost(
        flops=gemm.flops,
        bytes_read=operands + quantize_read,
        bytes_written=written + quantize_written,
        kernels=2,
        gemms=(gemm,),
        side_bytes=quantize_read + quantize_written,
    )
    return noted(cost, f"{gemm.dtype} GEMM", QUANTIZE_REMARK)


def linear_gemm(e: OpEvent, dtype: str, bias_bytes: int = 0) -> Costed:
    """A linear layer's mm/addmm as a quantized GEMM: Y[M, out] = X[M, in] W^T."""
    a, b = e.args[-2], e.args[-1]
    (m, k), n = a.shape, b.shape[1]
    gemm = Gemm(m, n, k, dtype=dtype, role="fprop")
    return quantized_cost(gemm, a, b, e.outputs[0], bias_bytes)


def quantized_input(e: OpEvent, found: Costed) -> tuple[int, int] | None:
    """(position in `e.tensors()`, elements) of the activation a priced op
    quantizes in a kernel of its own: the convolution's input (its first
    tensor) or the linear layer's X (the GEMM's left operand); None for none."""
    if QUANTIZE_REMARK not in found.remarks:
        return None
    tensors = e.tensors()
    position = len(tensors) - 2 if e.packet in LINEAR_PACKETS else 0
    return position, tensors[position].numel


def fold_quantize(priced: list[tuple[OpEvent, Costed]]) -> list[tuple[OpEvent, Costed]]:
    """Compiled inference: each quantize kernel fused into the epilogue of the
    op that produced its input (its 2 B/element read and its kernel dropped),
    where an earlier op of the pass wrote that input."""
    written: set[int] = set()
    out = []
    for event, found in priced:
        quantized = quantized_input(event, found)
        if quantized and len(event.reads) > quantized[0] and event.reads[quantized[0]] in written:
            dropped = QUANTIZE_READ_BYTES * quantized[1]
            cost = replace(
                found.cost,
                bytes_read=found.cost.bytes_read - dropped,
                side_bytes=found.cost.side_bytes - dropped,
                kernels=found.cost.kernels - 1,
            )
            remarks = tuple(r for r in found.remarks if r != QUANTIZE_REMARK)
            found = found._replace(cost=cost, remarks=(*remarks, FUSED_REMARK))
        written.update(event.writes)
        out.append((event, found))
    return out
