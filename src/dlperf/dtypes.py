"""Data types by the short names used everywhere in dlperf: the one table of
short name, torch dtypes and bytes per element.

`fp32` means true single precision on CUDA cores; `tf32` means fp32 storage
with Tensor Core math in TF32. Sizes are the bytes one element occupies in
memory (TF32 is stored as fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import DlperfError


@dataclass(frozen=True)
class DType:
    name: str
    bytes: float  # a whole number but for fp4's half byte
    # torch dtypes stored under this name; the first is the one a tensor of it gets
    torch_names: tuple[str, ...]


_TABLE = (
    DType("fp64", 8, ("float64",)),
    DType("fp32", 4, ("float32",)),
    DType("tf32", 4, ("float32",)),
    DType("fp16", 2, ("float16",)),
    DType("bf16", 2, ("bfloat16",)),
    DType("fp8", 1, ("float8_e4m3fn", "float8_e5m2")),
    DType("int8", 1, ("int8", "uint8")),
    # e2m1, two to a byte: Blackwell's fp4 Tensor Cores (NVFP4). No torch dtype maps
    # here: torch's float4_e2m1fn_x2 counts packed pairs, one byte each.
    DType("fp4", 0.5, ()),
)
BYTES_PER_ELEMENT = {d.name: d.bytes for d in _TABLE}
DTYPES = tuple(BYTES_PER_ELEMENT)
# torch dtype -> short name, for the torch dtypes the installed torch has (float32 is fp32:
# whether its math runs TF32 is the precision policy's call, not the tensor's).
TORCH_NAMES: dict[torch.dtype, str] = {
    getattr(torch, t): d.name for d in reversed(_TABLE) for t in d.torch_names if hasattr(torch, t)
}


def check_dtype(dtype: str) -> str:
    name = str(dtype).lower()
    if name not in BYTES_PER_ELEMENT:
        raise DlperfError(f"unknown dtype {dtype!r}; choose from: {', '.join(DTYPES)}")
    return name


def bytes_per_element(dtype: str) -> float:
    return BYTES_PER_ELEMENT[check_dtype(dtype)]


# GEMM outputs that are not the operands' dtype: integer GEMMs usually write
# int32; fp8 GEMMs accumulate in fp32 and write bf16 (torch._scaled_mm's
# out_dtype in torchao's float8 training, and Transformer Engine's).
_OUTPUT_BYTES = {"int8": 4, "fp8": 2, "fp4": 2}


def accumulator_bytes(dtype: str) -> float:
    """Bytes per element of a GEMM's output on operands of `dtype` (their own
    size, but for int8, fp8 and fp4)."""
    name = check_dtype(dtype)
    return _OUTPUT_BYTES.get(name, BYTES_PER_ELEMENT[name])


def name_of(dtype: torch.dtype, default: str | None = None) -> str:
    """The short name of a torch dtype ("fp16"); `default` (else torch's own
    name, "int64") for a dtype dlperf prices no math in."""
    if dtype in TORCH_NAMES:
        return TORCH_NAMES[dtype]
    return default if default is not None else str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a short name ("bf16") or of torch's own names and
    aliases ("bfloat16", "half", "int64")."""
    text = str(name).lower()
    names = next((d.torch_names for d in _TABLE if d.name == text), None)
    if names:
        return getattr(torch, names[0])
    found = getattr(torch, text, None)
    if isinstance(found, torch.dtype):
        return found
    raise DlperfError(
        f"unknown dtype {name!r}; choose from: {', '.join(DTYPES)}, "
        "or a torch dtype name such as float16 or int64"
    )


# Where a device lacks a dtype's math, the nearest it has, tried in order
# (fp8 data without fp8 Tensor Cores would be upcast to bf16, then fp16).
_NEAREST = {
    "bf16": ("fp16", "fp32"),
    "fp8": ("bf16", "fp16", "fp32"),
    "fp4": ("fp8", "bf16", "fp16", "fp32"),
}


def runnable_dtype(dtype: str, spec) -> str:
    """The math path a device runs `dtype` on: itself where the device has it,
    else the nearest it has (bf16 on a V100 runs fp16 math, else fp32)."""
    if dtype in spec.math:
        return dtype
    for candidate in _NEAREST.get(dtype, ("fp32",)):
        if candidate in spec.math:
            return candidate
    return next(iter(spec.math))
