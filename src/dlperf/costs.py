"""What an op costs, as numbers: FLOPs, bytes, kernels, the GEMMs it maps to,
and the hints only a device can resolve.

Conventions: one multiply-add is two FLOPs; bytes are those the kernel must
move through device memory. A `Cost` holds no labels and no hardware: the
category and family of an op come from its handler's registration (`ops`),
and a hint (NCHW data a Tensor Core kernel transposes, an input re-read
unless it fits on chip) is priced by `kernels.pricing.time` with the device's spec.
These value types sit below the kernels that price them and the op handlers
that build them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Gemm:
    """One GEMM shape an op runs `count` times (C[m,n] = A[m,k] B[k,n], `batch` at once)."""

    m: int
    n: int
    k: int
    batch: int = 1
    count: int = 1
    dtype: str = "fp32"  # math dtype
    storage: str = "fp32"  # element dtype in memory
    role: str = ""  # e.g. "fprop", "dgrad", "wgrad", "recurrent"
    # Bytes the kernel really moves when its operands are implicit (a
    # convolution's im2col matrix is never stored); 0 means the GEMM's own.
    tensor_bytes: float = 0.0
    # Kernel launches the `count` GEMMs take; 0 means one each. A persistent RNN
    # kernel runs every step of a sequence in one launch.
    launches: int = 0
    # A convolution's channel reduction (C*R*S; K*R*S for the data gradient):
    # CPU kernels run short dot products slowly. 0 for other GEMMs.
    conv_reduction: int = 0
    # Weight-only quantization of the B operand (`kernels.quantized`): its bits
    # (4 or 8; 0: not quantized) and the weights per scale group.
    weight_bits: int = 0
    quant_group: int = 0
    # A weight gradient summed in place into its buffer across micro-batches
    # (Megatron-Core's gradient_accumulation_fusion: C += A B into the fp32
    # main_grad): bytes per element of that buffer, which the kernel reads and
    # writes. 0: the output is written once in the accumulator's dtype.
    accumulate_bytes: int = 0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch * self.count


@dataclass(frozen=True)
class AttentionShape:
    """One scaled-dot-product attention call, for the fused-kernel pricing:
    q (batch, heads, q_len, head_dim), k (batch, kv_heads, kv_len, head_dim),
    v (batch, kv_heads, kv_len, value_dim). Which backend runs it depends on
    the device (`kernels.attention.choose_backend`), hence a hint."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    value_dim: int
    causal: bool
    dtype: str  # the inputs' dtype ("bf16")
    math_dtype: str  # what the policy runs their contractions in ("tf32" for fp32 under tf32)
    mask: str  # "" (none), "bool" or "float": an explicit attention mask
    dropout: float
    phase: str  # "forward" or "backward"
    requested: str  # "auto", or a kernel of `kernels.attention.BACKENDS`
    needs_grad: bool = True  # a backward will follow (the forward of a training step)
    # Bytes the fused kernel moves: q, k, v, the output and its log-sum-exp (their
    # gradients backward) and the mask; no L x S matrix.
    bytes: float = 0.0
    # The backend an aten op names itself (a trace of a real run): priced as that
    # kernel where the device runs it, else as `requested`.
    named: str = ""

    @property
    def forward_flops(self) -> float:
        """Q K^T and P V: 2 * lq * lk * (d + dv) per head; half the score
        blocks under a causal mask (the FlashAttention-2 paper's count)."""
        flops = 2.0 * self.batch * self.heads * self.q_len * self.kv_len
        flops *= self.head_dim + self.value_dim
        return flops * self.causal_share if self.causal else flops

    @property
    def causal_share(self) -> float:
        """The share of the q x kv scores a causal mask keeps, aligned to the
        last key (new tokens after a cache, as FlashAttention and the serving
        engines align it): the last q rows of a triangle, q kv - q^2 / 2 scores,
        half when q = kv (the paper's convention, the diagonal's half counted)."""
        q, kv = self.q_len, self.kv_len
        return 1 - q / (2 * kv) if q <= kv else kv / (2 * q)

    @property
    def flops(self) -> float:
        """Forward as above; backward 5 GEMMs: Q K^T again (recomputed), dP = dO V^T,
        dV = P^T dO, dQ = dS K, dK = dS^T Q, i.e. 2.5x forward when d = dv."""
        if self.phase == "forward":
            return self.forward_flops
        share = (3 * self.head_dim + 2 * self.value_dim) / (self.head_dim + self.value_dim)
        return self.forward_flops * share


@dataclass(frozen=True)
class Cost:
    """Numbers only; costs add up (`a + b`, `sum(costs)`)."""

    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    kernels: int = 1
    gemms: tuple[Gemm, ...] = ()
    # Bytes a GEMM-backed op moves outside its GEMM kernels (a bias gradient's
    # read of the output gradient), part of bytes_read; streamed after the GEMMs.
    side_bytes: float = 0.0
    # Hints: NCHW data (reads and writes) a Tensor Core kernel must transpose to
    # NHWC, and an input the kernel reads again unless its working set fits on
    # chip. Neither is in bytes_read: only the device can tell whether it applies.
    layout_transpose_bytes: float = 0.0
    reread_bytes: float = 0.0
    working_set_bytes: float = 0.0
    # Fused attention calls: their backend (and so their time) depends on the device.
    attention: tuple[AttentionShape, ...] = ()

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return Cost(**summed)

    def __radd__(self, other) -> Cost:
        # `sum(costs)` starts from 0
        return self if other == 0 else NotImplemented
