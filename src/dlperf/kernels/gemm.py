"""One GEMM on one device, as `dlperf gemm` reports it.

The kernel model (tiles, waves, split-K, alignment) is `gemm_tiles`; the time,
the limiter and the losses come from `pricing.time`, the same call that
prices every op of an analysis, so `dlperf gemm` and `dlperf analyze` agree
on a GEMM by construction. This module adds the report: FLOPs, bytes,
intensity against the datasheet ridge, and notes made from the losses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..costs import Cost, Gemm
from ..dtypes import accumulator_bytes, bytes_per_element, check_dtype
from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..hardware import gpu as get_gpu
from ..jsonable import Jsonable
from ..kinds import Bound, LossKind
from .gemm_tiles import TILES, predict_many
from .pricing import GemmTimer, Timing, time
from .roofline import arithmetic_intensity

__all__ = ["MAX_MATRIX_ELEMENTS", "TILES", "GemmResult", "gemm", "predict_many"]


@dataclass
class GemmResult(Jsonable):
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    gpu: str
    flops: float
    bytes: float
    arithmetic_intensity: float
    ridge_ops_per_byte: float
    bound: str
    time_s: float
    achieved_flops_per_s: float
    fraction_of_peak: float
    peak_flops_per_s: float
    tensor_cores: bool
    tile: str
    tiles: int
    waves: int
    split_k: int
    tile_efficiency: float
    wave_efficiency: float
    math_time_s: float
    memory_time_s: float
    latency_s: float
    alignment: dict[str, str]
    notes: list[str] = field(default_factory=list)


# No GPU holds a matrix of more elements (2**48 fp16 values are 512 TiB); the
# bound also keeps every byte and tile count of predict_many inside int64.
MAX_MATRIX_ELEMENTS = 2**48


def _check_sizes(m, n, k, batch):
    for name, value in (("M", m), ("N", n), ("K", k), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise DlperfError(f"GEMM size {name}={value!r} must be a positive whole number")
    m, n, k, batch = (int(v) for v in (m, n, k, batch))  # Python ints never overflow
    for label, rows, cols in (("A", m, k), ("B", k, n), ("C", m, n)):
        if batch * rows * cols > MAX_MATRIX_ELEMENTS:
            raise DlperfError(
                f"GEMM {m} x {n} x {k} (batch {batch}): matrix {label} would hold "
                f"{batch * rows * cols:.3g} elements, more than any GPU's memory "
                f"(limit 2**48 = {MAX_MATRIX_ELEMENTS:.3g})"
            )


def _check_fits(m: int, n: int, k: int, batch: int, dtype: str, spec: HardwareSpec) -> None:
    """Refuse a GEMM whose A, B and C together outgrow the device's memory."""
    held = batch * (m * k + k * n + m * n) * bytes_per_element(dtype)
    if spec.memory_bytes and held > spec.memory_bytes:
        raise DlperfError(
            f"GEMM {m} x {n} x {k} (batch {batch}): A, B and C hold {held / 2**30:,.0f} GiB "
            f"of {dtype}, more than the {spec.memory_bytes / 2**30:,.0f} GiB of the {spec.id}: "
            "give sizes that fit in its memory"
        )


def gemm(
    m: int,
    n: int,
    k: int,
    dtype: str = "fp16",
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    batch: int = 1,
    math_dtype: str | None = None,
) -> GemmResult:
    """Predict one GEMM (or `batch` independent ones of the same shape) on a device.

    `math_dtype` names the math path when it differs from the storage dtype
    (fp16 data with fp32 math, as cuBLAS runs it on Pascal); it defaults to `dtype`.
    """
    _check_sizes(m, n, k, batch)
    dtype = check_dtype(dtype)
    spec = get_gpu(gpu)
    _check_fits(m, n, k, batch, dtype, spec)
    math_dtype = check_dtype(math_dtype or dtype)
    unit = spec.unit(math_dtype)
    moved = float(
        batch * ((m * k + k * n) * bytes_per_element(dtype) + m * n * accumulator_bytes(dtype))
    )
    flops, peak = 2.0 * batch * m * n * k, unit.peak_flops_per_s
    one = Gemm(m, n, k, batch=batch, dtype=math_dtype, storage=dtype)
    timer = GemmTimer(spec)
    timing = time(Cost(flops=flops, bytes_read=moved, gemms=(one,)), spec, timer=timer, eager=False)
    price = timer(one)
    result = GemmResult(
        m=m,
        n=n,
        k=k,
        batch=batch,
        dtype=dtype,
        gpu=spec.id,
        flops=flops,
        bytes=moved,
        arithmetic_intensity=arithmetic_intensity(flops, moved),
        ridge_ops_per_byte=peak / spec.memory_bandwidth_bytes_per_s,
        bound=timing.bound,
        time_s=timing.seconds,
        achieved_flops_per_s=flops / timing.seconds,
        fraction_of_peak=flops / timing.seconds / peak,
        peak_flops_per_s=peak,
        tensor_cores=unit.tensor_cores,
        tile=price.tile,
        tiles=int(price.tiles),
        waves=int(price.waves),
        split_k=int(price.split_k),
        tile_efficiency=price.tile_efficiency,
        wave_efficiency=price.wave_efficiency,
        math_time_s=timing.math_s,
        memory_time_s=timing.memory_s,
        latency_s=timing.latency_s,
        alignment=timing.gemms[0].alignment,
    )
    result.notes = _notes(result, timing, spec, math_dtype)
    return result


def _notes(r: GemmResult, timing: Timing, spec: HardwareSpec, math_dtype: str) -> list[str]:
    """The losses in prose, with what the numbers alone do not say: the math
    path, split-K, and why the limiter is what it is."""
    notes = []
    tensor_core_dtypes = [d for d, u in spec.math.items() if u.tensor_cores]
    if not r.tensor_cores and tensor_core_dtypes and math_dtype in ("fp32", "fp64"):
        notes.append(
            f"{math_dtype} runs on CUDA cores; Tensor Cores serve {', '.join(tensor_core_dtypes)}"
        )
    notes += [loss.describe() for loss in timing.losses if loss.kind != LossKind.LATENCY]
    if r.split_k > 1:
        notes.append(f"split-K by {r.split_k}: too few output tiles to fill {spec.sm_count} SMs")
    below = r.arithmetic_intensity < r.ridge_ops_per_byte
    if r.bound == Bound.MEMORY:
        notes.append(
            f"memory-bound: moving its bytes takes longer than its math at attainable rates "
            f"({r.arithmetic_intensity:.1f} FLOPs/B, {'below' if below else 'above'} the "
            f"datasheet ridge {r.ridge_ops_per_byte:.1f} of {spec.id})"
        )
    elif r.bound == Bound.MATH and below:
        notes.append(
            f"math-bound at attainable rates although {r.arithmetic_intensity:.1f} FLOPs/B is "
            f"below the datasheet ridge {r.ridge_ops_per_byte:.1f}: efficiency losses slow its "
            "math more than its memory traffic"
        )
    notes += [loss.describe() for loss in timing.losses if loss.kind == LossKind.LATENCY]
    return notes
