"""Probes of the local device's achievable rates, used to build its spec."""

from __future__ import annotations

import torch

from .timing import time_callable

_TORCH_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_flops_per_s(dtype: str = "fp32", size: int | None = None, device: str = "cpu") -> float:
    """Best achieved FLOP/s of square matmuls (2 n^3 FLOPs per call), over sizes."""
    if size is None:
        return max(matmul_flops_per_s(dtype, n, device) for n in (512, 1024, 2048))
    a = torch.randn(size, size, device=device).to(_TORCH_DTYPES[dtype])
    b = torch.randn(size, size, device=device).to(_TORCH_DTYPES[dtype])
    m = time_callable(lambda: torch.mm(a, b), warmup=2, repeats=5, min_sample_s=0.1)
    return 2.0 * size**3 / m.min_s


def copy_bandwidth_bytes_per_s(megabytes: int = 256, device: str = "cpu") -> float:
    """Streaming copy rate: each call reads and writes the buffer once."""
    count = megabytes * 2**20 // 4
    src = torch.ones(count, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    m = time_callable(lambda: dst.copy_(src), warmup=2, repeats=5)
    return 2.0 * src.numel() * 4 / m.median_s


def call_latency_s(device: str = "cpu") -> float:
    """Time of one framework call that does almost nothing."""
    x = torch.ones(1, device=device)
    m = time_callable(lambda: torch.add(x, x), warmup=10, repeats=9, min_sample_s=0.02)
    return m.median_s
