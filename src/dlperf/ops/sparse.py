"""2:4 structured sparsity on a linear layer's GEMMs (`--sparsity 2:4`).

Ampere and later Tensor Cores run a GEMM whose one operand keeps two of every
four values along the reduction (cuSPARSELt, PyTorch's semi-structured
sparse tensors) at twice the dense rate: half the multiply-adds, the kept
values and a 2-bit index for each (4 bits per group of 4: an eighth of a
byte per dense element). The pruned operand is the layer's weight, so the
GEMMs that run sparse are those that reduce over the weight's pruned
dimension with the weight as an operand: forward (Y = X W^T) and the input
gradient (dX = dY W). The weight gradient (dW = dY^T X) has no sparse
operand and stays dense.

Priced as a dense GEMM over half the reduction (tiles and waves over M and
N unchanged, each tile doing half the math) that moves the activation
whole, the weight compressed and the output. Training prunes and compresses
the weight again each step (it changes each step), once for forward and
once, transposed, for the input gradient: read dense, written compressed,
charged on the input-gradient GEMM, which only training runs; inference
keeps the compressed weight.
"""

from __future__ import annotations

import math

from ..dtypes import name_of
from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, Costed, Gemm, noted
from .factories import out_bytes
from .float8 import gemm_role
from .linear import is_linear_module

METADATA_BYTES_PER_ELEMENT = 1 / 8  # 2 bits per kept value, 2 kept per 4


def compressed_bytes(weight: TensorMeta) -> float:
    """A weight's bytes pruned 2:4: half its values and their indices."""
    return weight.numel * (weight.itemsize / 2 + METADATA_BYTES_PER_ELEMENT)


def runs_sparse(e: OpEvent, ctx: CostContext) -> bool:
    """Whether this mm/addmm runs 2:4 sparse under the run's policy."""
    if not ctx.precision.sparse_linear or not is_linear_module(e.module_type):
        return False
    a, b = e.args[-2], e.args[-1]
    if not (isinstance(a, TensorMeta) and isinstance(b, TensorMeta)):
        return False
    return len(a.shape) == 2 and len(b.shape) == 2 and gemm_role(e) in ("fprop", "dgrad")


def linear_gemm(e: OpEvent, ctx: CostContext, bias_bytes: int = 0) -> Costed:
    """The cost of a linear layer's forward or input-gradient GEMM, 2:4 sparse."""
    a, b = e.args[-2], e.args[-1]
    (m, k), n = a.shape, b.shape[1]
    role = gemm_role(e)
    weight = compressed_bytes(b)
    moved = a.nbytes + weight + bias_bytes + out_bytes(e)
    gemm = Gemm(
        m,
        n,
        math.ceil(k / 2),
        dtype=ctx.precision.contraction_dtype(a.dtype),
        storage=name_of(a.dtype, "fp32"),
        role=f"2:4 sparse {role}",
        tensor_bytes=moved,
    )
    compress_read = compress_written = 0.0
    if role == "dgrad":  # training: the weight pruned and compressed again, twice
        compress_read, compress_written = 2 * b.nbytes, 2 * weight
    side = compress_read + compress_written
    cost = Cost(
        flops=gemm.flops,
        bytes_read=a.nbytes + weight + bias_bytes + compress_read,
        bytes_written=out_bytes(e) + compress_written,
        kernels=1 + (2 if side else 0),
        gemms=(gemm,),
        side_bytes=side,
    )
    remark = f"2:4 sparse {role}: half the multiply-adds, the weight at {weight / b.nbytes:.0%}"
    return noted(cost, remark + (", pruned and compressed each step" if side else ""))
