"""Float8 training of linear layers (`--precision fp8`), as torchao's
`convert_to_float8_training` (tensorwise scaling, its default) and Transformer
Engine run it: the GEMMs of linear layers on fp8 Tensor Cores, everything else
as under amp-bf16.

Which GEMMs. A 2-D `mm` or `addmm` on operands of autocast's dtype, recorded
inside a linear layer: a module whose class is named `Linear` or `...Linear`
(nn.Linear and its subclasses, which torchao converts, and look-alikes such as
Transformer Engine's `LayerNormLinear`; not `Bilinear`), or Hugging Face's
`Conv1D` (GPT-2's linear layer, weight stored [in, out]; torchao converts only
nn.Linear, so GPT-2 is priced as if its Conv1D layers were swapped for Linear).
Both feature counts must be multiples of 16: `torch._scaled_mm` needs it, and
torchtitan's float8 filter (components/quantization/utils.py,
`module_filter_fn`) leaves other layers in bf16 (an LM head over GPT-2's 50257
tokens, say). The rule reads class names because a trace records names only.

Roles, from PyTorch's autograd formulas for mm (FunctionsManual.cpp,
`mm_mat1_backward` and `mm_mat2_backward`), for M tokens, `in` and `out` features:
- fprop (any phase but backward; a recompute is a forward again):
  Y[M, out] = X[M, in] W^T, so k = in and n = out.
- wgrad (backward, the left operand a transposed view): dW = dY^T X for
  nn.Linear (weight [out, in]), X^T dY for Conv1D (weight [in, out]); the
  contraction runs over the M tokens.
- dgrad (backward, otherwise): dX[M, in] = dY W, so k = out and n = in.

Casts, as torchao's own float8 roofline counts them (torchao/float8/
roofline_utils.py, `get_tensor_memory_traffic_bytes`, bf16 in, fp8 out): a
tensor is read once to find its amax (2 B/element; a two-stage reduction, 2
kernels) and once more to be written in fp8 in both layouts its GEMMs take
(2 B read, 2 x 1 B written, 1 kernel): Hopper's fp8 Tensor Cores take
K-major operands only, so the backward GEMMs use transposed copies. Each
tensor is cast once per step and its copies reused (torchao's tensorwise path
saves the fp8 input and weight for backward and casts the output gradient
once for both backward GEMMs):
- fprop casts X (e4m3) and W (e4m3);
- wgrad casts dY (e5m2): every trained linear layer runs a wgrad, while the
  first layer of a network runs no dgrad;
- dgrad casts nothing.
The weight is cast from the bf16 copy the trace shows (torchao reads the fp32
master instead: 4 B rather than 2 per read, but makes no bf16 copy). The
amax-to-scale arithmetic is a few scalar ops, part of the reduction's second
kernel. Eager torchao runs each cast as several unfused element-wise kernels;
priced here are the fused kernels torch.compile (torchao) and Transformer
Engine's cast-transpose run. A bias is added in the GEMM's epilogue, as
Transformer Engine does.
"""

from __future__ import annotations

from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, Costed, Gemm, noted
from .factories import out_bytes
from .linear import CONV1D, is_linear_module

# Storage of an fp8 operand; the GEMM writes bf16 (`dtypes.accumulator_bytes`).
FP8_BYTES = 1
# Per element of a bf16 tensor cast to fp8: the amax pass reads 2 B, the cast
# reads 2 B and writes 1 B in each of the two layouts.
CAST_READ_BYTES_PER_ELEMENT = 2 + 2
CAST_WRITTEN_BYTES_PER_ELEMENT = 2 * FP8_BYTES
# Amax reduction (two stages) and the cast itself.
KERNELS_PER_CAST = 3
# torch._scaled_mm's (and torchtitan's filter's) multiple for the feature counts.
FEATURE_MULTIPLE = 16


def _transposed(t: TensorMeta) -> bool:
    """A 2-D transposed view of a row-major tensor (column-major strides)."""
    rows, cols = t.shape
    return rows > 1 and t.stride[0] == 1 and (cols == 1 or t.stride[1] == rows)


def gemm_role(e: OpEvent) -> str:
    """fprop, dgrad or wgrad of a linear layer's GEMM (see the module docstring)."""
    if e.phase != "backward":
        return "fprop"
    return "wgrad" if _transposed(e.args[-2]) else "dgrad"


def _features(role: str, a: TensorMeta, b: TensorMeta) -> tuple[int, int]:
    """The layer's two feature counts, from the GEMM's operands a[m, k] b[k, n]."""
    (m, k), n = a.shape, b.shape[1]
    return (m, n) if role == "wgrad" else (k, n)


def runs_fp8(e: OpEvent, ctx: CostContext) -> bool:
    """Whether this mm/addmm runs on fp8 Tensor Cores under the run's policy."""
    policy = ctx.precision
    if not policy.fp8_linear or not is_linear_module(e.module_type):
        return False
    a, b = e.args[-2], e.args[-1]
    if not (isinstance(a, TensorMeta) and isinstance(b, TensorMeta)):
        return False
    if len(a.shape) != 2 or len(b.shape) != 2:
        return False
    # The compute dtype: autocast's, or the weights' own where the run casts
    # them instead (FSDP's mixed precision, `precision.compute_policy`).
    compute = policy.autocast_dtype or policy.param_dtype
    if a.dtype != compute or b.dtype != compute:
        return False
    return all(f % FEATURE_MULTIPLE == 0 for f in _features(gemm_role(e), a, b))


def cast_elements(e: OpEvent, role: str) -> tuple[int, ...]:
    """Element counts of the tensors this GEMM casts to fp8 (one entry each)."""
    a, b = e.args[-2], e.args[-1]
    if role == "fprop":
        return (a.numel, b.numel)  # X and W
    if role == "wgrad":
        # dY is the factor whose rows or columns are the out features: the left
        # one (dY^T) for nn.Linear's [out, in] weight, the right one for Conv1D's.
        return (b.numel if e.module_type == CONV1D else a.numel,)
    return ()


def linear_gemm(e: OpEvent, bias_bytes: int = 0) -> Costed:
    """The cost of a linear layer's GEMM in fp8, with its casts as side work."""
    a, b = e.args[-2], e.args[-1]
    (m, k), n = a.shape, b.shape[1]
    role = gemm_role(e)
    gemm = Gemm(m, n, k, dtype="fp8", storage="fp8", role=role)
    cast = sum(cast_elements(e, role))
    cast_read = CAST_READ_BYTES_PER_ELEMENT * cast
    cast_written = CAST_WRITTEN_BYTES_PER_ELEMENT * cast
    casts = len(cast_elements(e, role))
    cost = Cost(
        flops=gemm.flops,
        bytes_read=(a.numel + b.numel) * FP8_BYTES + bias_bytes + cast_read,
        bytes_written=out_bytes(e) + cast_written,
        kernels=1 + KERNELS_PER_CAST * casts,
        gemms=(gemm,),
        side_bytes=cast_read + cast_written,
    )
    remark = f"fp8 {role}" + (f" with {casts} fp8 cast(s)" if casts else "")
    return noted(cost, remark)
