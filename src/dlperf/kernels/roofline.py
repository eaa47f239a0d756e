"""The roofline: pure functions of FLOPs, bytes and a device.

Conventions, held everywhere in dlperf: one multiply-add is two FLOPs; bytes
are those a kernel must move to and from device memory; times are seconds.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import runnable_dtype
from ..kinds import Bound
from .fixed_costs import streaming_latency_s

_MATH, _MEMORY, _LATENCY = Bound.MATH, Bound.MEMORY, Bound.LATENCY


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte moved."""
    if bytes_moved <= 0:
        return float("inf") if flops > 0 else 0.0
    return flops / bytes_moved


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The ops:byte ratio of a device: intensity where math and memory time are equal."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def attainable_flops_per_s(intensity: float, peak_flops_per_s: float, bandwidth: float) -> float:
    return min(peak_flops_per_s, intensity * bandwidth)


def roofline_time_s(flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth: float):
    """The plain roofline: the larger of math time at peak and memory time at full bandwidth."""
    return max(flops / peak_flops_per_s, bytes_moved / bandwidth)


def limiter(
    math_time_s: float, memory_time_s: float, latency_time_s: float, starved: bool = False
) -> Bound:
    """Which term sets a kernel's predicted time: 'math', 'memory' or 'latency'.

    The one rule of dlperf, used by `dlperf gemm`, the per-op analysis, the
    trace report and the advice alike. The terms are the model's predictions
    at attainable rates (efficiency, tile and wave losses included), not the
    datasheet roofline: a GEMM just below the datasheet ridge can still spend
    longer on math than on memory. Latency wins when the fixed cost of running
    the kernel is larger than both, or when the kernel is `starved`: too little
    parallel work to occupy the device, so neither roof is reached (the
    guides' latency-limited regime).
    """
    if starved or latency_time_s >= max(math_time_s, memory_time_s):
        return _LATENCY
    return _MATH if math_time_s >= memory_time_s else _MEMORY


def cold_efficiency(spec) -> float:
    """Fraction of datasheet bandwidth for data far larger than L2, streamed once
    (the warm rate where the family has no separate cold figure)."""
    eff = spec.efficiency
    return eff.cold_dram_efficiency or eff.streaming_dram_efficiency


def streaming_terms(bytes_moved, spec, flops=0.0, dtype: str = "fp32"):
    """(math_s, memory_s, latency_s) of a memory-bound kernel (element-wise,
    reduction, normalization, copy).

    A kernel pays its launch latency, then moves its bytes at the attainable
    bandwidth; a tensor too small to keep every SM's share of bytes in flight
    draws proportionally less (the small-tensor plateau of the memory-limited
    layers guide, figures 1-3). Of its b bytes, a share 1 - b/L2 is still in
    L2 where its producer left it and streams at `streaming_dram_efficiency`
    (what benchmarks that rerun one op see); the rest comes from DRAM at
    `cold_dram_efficiency` (0: the same). Its arithmetic runs on CUDA cores
    and rarely matters (a device that lacks `dtype` runs the nearest it has).
    Works on numbers and on numpy arrays alike.
    """
    eff = spec.efficiency
    in_flight = spec.sm_count * eff.saturation_bytes_per_sm
    share = np.minimum(1.0, np.maximum(bytes_moved, 1.0) / in_flight * eff.sm_bandwidth_share)
    peak = spec.sustained_bandwidth_bytes_per_s() * share
    warm, cold = eff.streaming_dram_efficiency, cold_efficiency(spec)
    if spec.kind == "cpu" or not spec.l2_cache_bytes or cold == warm:
        memory_s = bytes_moved / (peak * warm)
    else:
        in_l2 = np.clip(1.0 - np.asarray(bytes_moved, dtype=float) / spec.l2_cache_bytes, 0.0, 1.0)
        memory_s = bytes_moved * (in_l2 / warm + (1.0 - in_l2) / cold) / peak
    math_rate = spec.peak_flops_per_s(runnable_dtype(dtype, spec))
    return flops / math_rate, memory_s, streaming_latency_s(spec)


def streaming_time_s(bytes_moved, spec, flops=0.0, dtype: str = "fp32"):
    """Time of a memory-bound kernel: its latency, then the longer of its math
    and its memory traffic (`streaming_terms`)."""
    math_s, memory_s, latency_s = streaming_terms(bytes_moved, spec, flops, dtype)
    return latency_s + np.maximum(memory_s, math_s)
