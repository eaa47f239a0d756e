"""Precision policies, as users set them.

- `fp32`: fp32 weights and math on CUDA cores (TF32 off).
- `tf32`: fp32 weights; matmuls and convolutions run TF32 on Tensor Cores.
- `amp-fp16` / `amp-bf16`: fp32 weights (master copy), autocast runs
  matmuls and convolutions in half precision and the rest as autocast decides.
- `fp16` / `bf16`: weights and activations in half precision throughout.
- `auto` (the default of the command line): `amp-bf16` where the device has
  bf16 math, else `amp-fp16`, else `fp32`; see `resolve_for`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import DlperfError


@dataclass(frozen=True)
class Precision:
    name: str
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    tf32: bool

    @property
    def is_mixed(self) -> bool:
        return self.autocast_dtype is not None

    def contraction_dtype(self, torch_dtype: torch.dtype) -> str:
        """The math dtype a matmul or convolution on tensors of `torch_dtype` runs in."""
        if torch_dtype == torch.float32:
            return "tf32" if self.tf32 else "fp32"
        return DTYPE_NAMES.get(torch_dtype, "fp32")


DTYPE_NAMES = {
    torch.float64: "fp64",
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.int8: "int8",
    torch.uint8: "int8",
}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        DTYPE_NAMES[getattr(torch, _name)] = "fp8"

POLICIES = {
    "fp32": Precision("fp32", torch.float32, None, tf32=False),
    "tf32": Precision("tf32", torch.float32, None, tf32=True),
    "amp-fp16": Precision("amp-fp16", torch.float32, torch.float16, tf32=False),
    "amp-bf16": Precision("amp-bf16", torch.float32, torch.bfloat16, tf32=False),
    "fp16": Precision("fp16", torch.float16, None, tf32=False),
    "bf16": Precision("bf16", torch.bfloat16, None, tf32=False),
}


def precision(name: str | Precision) -> Precision:
    if isinstance(name, Precision):
        return name
    key = str(name).lower()
    if key not in POLICIES:
        choices = ", ".join([*POLICIES, AUTO])
        raise DlperfError(f"unknown precision {name!r}; choose from: {choices}")
    return POLICIES[key]


# The math dtype each policy needs from the device; `auto` tries these in order.
MATH_DTYPE = {
    "fp32": "fp32",
    "tf32": "tf32",
    "amp-fp16": "fp16",
    "amp-bf16": "bf16",
    "fp16": "fp16",
    "bf16": "bf16",
}
AUTO = "auto"
AUTO_ORDER = ("amp-bf16", "amp-fp16", "fp32")


def resolve_for(spec, name: str | Precision = AUTO) -> Precision:
    """The policy `name` on the device `spec`, refused if the device lacks its math.

    `auto` is mixed precision in bf16 where the device has bf16 math, else in
    fp16, else fp32 (on a CPU the probe says which dtypes it runs).
    """
    if not isinstance(name, Precision) and str(name).lower() == AUTO:
        for option in AUTO_ORDER:
            if spec.has_dtype(MATH_DTYPE[option]):
                return POLICIES[option]
        raise DlperfError(f"{spec.id} runs none of {', '.join(AUTO_ORDER)}; check its spec")
    policy = precision(name)
    needed = MATH_DTYPE[policy.name]
    if not spec.has_dtype(needed):
        fallback = resolve_for(spec, AUTO).name
        raise DlperfError(f"{spec.id} has no {needed} math; use --precision {fallback} (or auto)")
    return policy
