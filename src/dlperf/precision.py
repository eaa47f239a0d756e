"""Precision policies, as users set them.

- `fp32`: fp32 weights and math on CUDA cores (TF32 off).
- `tf32`: fp32 weights; matmuls and convolutions run TF32 on Tensor Cores.
- `amp-fp16` / `amp-bf16`: fp32 weights (master copy), autocast runs
  matmuls and convolutions in half precision and the rest as autocast decides.
- `fp16` / `bf16`: weights and activations in half precision throughout.
- `fp8`: float8 training as torchao's `convert_to_float8_training` and
  Transformer Engine run it: the model runs as under `amp-bf16` (fp32 master
  weights, autocast to bf16; attention, norms and everything else in bf16),
  and the GEMMs of its linear layers run on fp8 Tensor Cores (e4m3 operands
  forward, e5m2 gradients, fp32 accumulation, bf16 output) after casts that
  find each tensor's scale (amax); see `ops/float8.py`. Needs Hopper, Ada or
  Blackwell. With `--infer` it runs as TensorRT runs an fp8 engine: the
  `int8` rules below with fp8 (e4m3) in place of int8 and bf16 for the rest.
- `mxfp8` / `nvfp4`: Blackwell's block-scaled formats, as Transformer Engine's
  `MXFP8BlockScaling` and `NVFP4BlockScaling` recipes run them: `fp8` above
  with the linear layers' GEMMs on block-scaled Tensor Cores. MXFP8: e4m3
  everywhere, one power-of-two scale (e8m0) per 32 elements, at the fp8 rate,
  and no amax pass (each block's scale comes from the block). NVFP4: e2m1 (half
  a byte), one e4m3 scale per 16 elements under one fp32 scale per tensor (an
  amax pass, as tensorwise fp8), at the fp4 rate, twice fp8's. See
  `LinearFormat` and `ops/float8.py`. Needs compute capability 10.0 or later.
- `int8` (inference only): as TensorRT runs an int8 engine: convolutions and
  linear layers as int8 Tensor Core GEMMs (int32 accumulation, fp16 output)
  on weights stored in int8, their inputs quantized per tensor; everything
  else in fp16; see `ops/quantized.py`. Needs int8 math (Turing and later
  Tensor Cores, or Pascal's DP4A on CUDA cores, as the spec's math table says).
- `auto` (the default of the command line): `amp-bf16` where the device has
  bf16 math, else `amp-fp16`, else `fp32`; see `resolve_for`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .dtypes import bytes_per_element, name_of
from .errors import DlperfError


@dataclass(frozen=True)
class LinearFormat:
    """How a low-precision recipe stores the operands of the linear layers' GEMMs."""

    name: str
    # The Tensor Core math the GEMMs run (`dtypes`): fp8 or fp4.
    gemm_dtype: str
    # Elements that share one scale (0: one scale for the whole tensor) and its bytes.
    block: int = 0
    scale_bytes: int = 0
    # A pass over the whole tensor for its amax before the cast: a per-tensor scale
    # (tensorwise fp8, NVFP4's outer scale); block scales need none.
    amax_pass: bool = True
    # The oldest compute capability whose Tensor Cores run it.
    min_compute_capability: tuple[int, int] = (8, 9)

    @property
    def gathered_layouts(self) -> int:
        """Layouts a sequence-parallel all-gather moves: one where the other is the
        gathered copy transposed (one scale per tensor), both where blocks of 32 or
        16 along a row are not blocks along a column (the column-wise copy has its
        own scales)."""
        return 2 if self.block else 1

    @property
    def bytes_per_element(self) -> float:
        """Bytes of one element of a cast copy, its share of the block scales with it."""
        per_block = self.scale_bytes / self.block if self.block else 0.0
        return bytes_per_element(self.gemm_dtype) + per_block


TENSORWISE_FP8 = LinearFormat("fp8", "fp8")
LINEAR_FORMATS = {
    f.name: f
    for f in (
        TENSORWISE_FP8,
        LinearFormat("mxfp8", "fp8", 32, 1, amax_pass=False, min_compute_capability=(10, 0)),
        LinearFormat("nvfp4", "fp4", 16, 1, amax_pass=True, min_compute_capability=(10, 0)),
    )
}


@dataclass(frozen=True)
class Precision:
    name: str
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    tf32: bool
    # The math dtype the policy needs from the device (`resolve_for` checks it).
    math: str
    # Linear layers' GEMMs run in a low-precision format (the cost handlers read it
    # through CostContext): `linear_format`, tensorwise fp8 unless a block-scaled one.
    fp8_linear: bool = False
    linear_format: LinearFormat = TENSORWISE_FP8
    # Inference as TensorRT runs a quantized engine: convolutions' and linear
    # layers' GEMMs in this dtype ("int8" or "fp8"), "" for none (`ops/quantized.py`).
    quantized_gemms: str = ""
    # A policy for inference only (`resolve_for` refuses it for training).
    inference_only: bool = False
    # Linear layers' weights pruned 2:4 and their GEMMs on the sparse Tensor
    # Core path (`ops/sparse.py`, `with_sparsity`).
    sparse_linear: bool = False

    @property
    def is_mixed(self) -> bool:
        return self.autocast_dtype is not None

    def contraction_dtype(self, torch_dtype: torch.dtype) -> str:
        """The math dtype a matmul or convolution on tensors of `torch_dtype` runs in."""
        if torch_dtype == torch.float32:
            return "tf32" if self.tf32 else "fp32"
        return name_of(torch_dtype, "fp32")

    @property
    def master_weight_bytes(self) -> int:
        """Bytes per element of the weights the optimizer updates (and of their
        gradients and the optimizer's states): fp32 masters under fp32 and mixed
        precision, half precision when training in fp16/bf16 throughout."""
        return bytes_per_element(name_of(self.param_dtype, "fp32"))

    @property
    def grad_bytes(self) -> int:
        """Bytes per element of a weight gradient: the weights' own dtype."""
        return self.master_weight_bytes

    @property
    def cast_weight_bytes(self) -> int:
        """Bytes per element of the half-precision copy of the weights that
        autocast keeps beside the masters (0 without autocast)."""
        return bytes_per_element(name_of(self.autocast_dtype)) if self.is_mixed else 0


POLICIES = {
    p.name: p
    for p in (
        Precision("fp32", torch.float32, None, tf32=False, math="fp32"),
        Precision("tf32", torch.float32, None, tf32=True, math="tf32"),
        Precision("amp-fp16", torch.float32, torch.float16, tf32=False, math="fp16"),
        Precision("amp-bf16", torch.float32, torch.bfloat16, tf32=False, math="bf16"),
        Precision("fp16", torch.float16, None, tf32=False, math="fp16"),
        Precision("bf16", torch.bfloat16, None, tf32=False, math="bf16"),
        # Memory as amp-bf16: fp32 masters, and 2 bytes per weight element beside
        # them. torchao's dynamic scaling keeps no bf16 copy but casts the weight to
        # fp8 each forward in two layouts (row- and column-major, 2 x 1 byte) saved
        # for backward, so the bf16 copy's 2 bytes neither over- nor undercount it.
        Precision("fp8", torch.float32, torch.bfloat16, tf32=False, math="fp8", fp8_linear=True),
        *(
            Precision(
                f.name,
                torch.float32,
                torch.bfloat16,
                tf32=False,
                math=f.gemm_dtype,
                fp8_linear=True,
                linear_format=f,
            )
            for f in LINEAR_FORMATS.values()
            if f.block
        ),
        Precision(
            "int8",
            torch.float16,
            None,
            tf32=False,
            math="int8",
            quantized_gemms="int8",
            inference_only=True,
        ),
    )
}
# `fp8` for inference (`resolve_for` picks it): bf16 weights and activations,
# fp8 GEMMs for convolutions and linear layers, as an fp8 TensorRT engine.
FP8_INFERENCE = Precision(
    "fp8", torch.bfloat16, None, tf32=False, math="fp8", quantized_gemms="fp8"
)


def compute_policy(spec, policy: Precision, training: bool | None = True) -> Precision:
    """What a mixed-precision policy runs as where the weights are cast to its
    compute dtype instead of under autocast (FSDP's mixed precision, Megatron's
    bf16 weights): the pure policy of that dtype, and under fp8 the same with
    the linear layers' GEMMs still on fp8 Tensor Cores (Transformer Engine and
    torchao run fp8 GEMMs from bf16 weights and activations alike)."""
    compute = resolve_for(spec, name_of(policy.autocast_dtype), training)
    if policy.fp8_linear:
        return dataclasses.replace(compute, name=policy.name, math=policy.math, fp8_linear=True,
                                   linear_format=policy.linear_format)  # fmt: skip
    return compute


def precision(name: str | Precision) -> Precision:
    if isinstance(name, Precision):
        return name
    key = str(name).lower()
    if key not in POLICIES:
        choices = ", ".join([*POLICIES, AUTO])
        raise DlperfError(f"unknown precision {name!r}; choose from: {choices}")
    return POLICIES[key]


# `auto` tries these in order.
AUTO = "auto"
AUTO_ORDER = ("amp-bf16", "amp-fp16", "fp32")


SPARSITIES = ("2:4",)
# The math a 2:4 sparse GEMM runs in (cuSPARSELt's sparse Tensor Core types
# this tool prices; fp8 and int8 sparse GEMMs are not).
SPARSE_MATH = ("tf32", "fp16", "bf16")


def with_sparsity(spec, policy: Precision, sparsity: str | None) -> Precision:
    """`policy` with linear layers' weights pruned `sparsity` (2:4), refused
    where the GPU has no sparse Tensor Cores (before Ampere) or the policy's
    GEMMs do not run on them."""
    if not sparsity:
        return policy
    if sparsity not in SPARSITIES:
        raise DlperfError(f"unknown sparsity {sparsity!r}; dlperf prices 2:4")
    refusal = sparsity_refusal(spec, policy)
    if refusal:
        raise DlperfError(refusal)
    return dataclasses.replace(policy, sparse_linear=True)


def sparsity_refusal(spec, policy: Precision) -> str | None:
    """Why 2:4 sparsity cannot run under `policy` on `spec`, or None where it can."""
    if spec.kind == "cpu" or _capability(spec)[0] < 8:
        return (
            f"{spec.id} has no sparse Tensor Cores (2:4 sparsity needs Ampere or later); "
            "drop --sparsity"
        )
    if policy.math not in SPARSE_MATH or policy.quantized_gemms or policy.fp8_linear:
        return (
            f"--sparsity 2:4 is priced for {', '.join(SPARSE_MATH)} GEMMs, and "
            f"--precision {policy.name} runs {policy.math}: use amp-bf16, bf16, fp16 or tf32"
        )
    return None


def resolve_for(spec, name: str | Precision = AUTO, training: bool | None = None) -> Precision:
    """The policy `name` on the device `spec`, refused if the device lacks its math.

    `auto` is mixed precision in bf16 where the GPU has bf16 math, else in
    fp16, else fp32; on a CPU it is fp32 (see below). `training`
    (None where the caller does not say) refuses an inference-only policy for
    training and picks fp8's inference form for inference.
    """
    if not isinstance(name, Precision) and str(name).lower() == AUTO:
        if spec.kind == "cpu":
            # CPU autocast casts around every op and runs the element-wise ones in bf16
            # slower than in fp32: a step ran 531 ms in amp-bf16 against 321 ms in fp32
            # on this project's 2-core EPYC (issue 21), though its bf16 GEMMs were faster
            return POLICIES["fp32"]
        for option in AUTO_ORDER:
            if spec.has_dtype(POLICIES[option].math):
                return POLICIES[option]
        raise DlperfError(f"{spec.id} runs none of {', '.join(AUTO_ORDER)}; check its spec")
    policy = precision(name)
    needed = policy.math
    refusal = _format_refusal(spec, policy)
    if refusal:
        raise DlperfError(refusal)
    if not spec.has_dtype(needed):
        fallback = resolve_for(spec, AUTO).name
        if needed == "fp8":
            raise DlperfError(
                f"{spec.id} has no fp8 Tensor Cores (fp8 needs Hopper, Ada or Blackwell); "
                f"use --precision {fallback} (or auto)"
            )
        if needed == "int8":
            raise DlperfError(
                f"{spec.id} has no int8 math (int8 needs Turing or later Tensor Cores, "
                f"or Pascal's DP4A); use --precision fp16 or {fallback}"
            )
        raise DlperfError(f"{spec.id} has no {needed} math; use --precision {fallback} (or auto)")
    return _for_step(policy, training)


def _capability(spec) -> tuple[int, int]:
    """(major, minor) of the spec's compute capability; (0, 0) where it names none."""
    major, _, minor = (spec.compute_capability or "0").partition(".")
    return int(major), int(minor or 0)


def _format_refusal(spec, policy: Precision) -> str | None:
    """Why `spec`'s Tensor Cores cannot run the policy's block-scaled format, or None."""
    fmt = policy.linear_format
    if not policy.fp8_linear or not fmt.block:
        return None
    capable = _capability(spec) >= fmt.min_compute_capability
    if spec.kind != "cpu" and capable and spec.has_dtype(fmt.gemm_dtype):
        return None
    other = "fp8" if spec.has_dtype("fp8") and spec.kind != "cpu" else AUTO
    return (
        f"--precision {policy.name} runs on Blackwell's block-scaled Tensor Cores "
        f"(compute capability 10.0 or later); {spec.id} has none: use --precision {other}"
    )


def _for_step(policy: Precision, training: bool | None) -> Precision:
    """The form of `policy` for a training step or an inference pass."""
    if training is None:
        return policy
    if training and policy.inference_only:
        raise DlperfError(
            f"{policy.name} is an inference precision: "
            "add --infer, or use amp-bf16/fp8 for training"
        )
    if policy.name == "fp8":
        return POLICIES["fp8"] if training else FP8_INFERENCE
    return policy
