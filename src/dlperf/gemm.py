"""GEMM performance model: C[m, n] = A[m, k] B[k, n], optionally batched.

The output is split into thread-block tiles (the sizes cuBLAS picks among);
tiles run in waves over the SMs. The model prices every candidate tile and
split-K factor and keeps the fastest, as a library heuristic would:

    per-SM math rate = peak / SMs x math efficiency x tile reuse x alignment
    math time        = ceil(tiles / SMs) x tile work / per-SM rate
                       + waves x fixed tile cost (pipeline fill, epilogue)
    memory time      = bytes / attainable bandwidth (less when few SMs are busy)
    kernel time      = kernel latency + max(math time, memory time)

Tile quantization (partial tiles compute padding) and wave quantization (the
last wave leaves SMs idle) fall out of the counting; see docs/hardware-model.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .dtypes import accumulator_bytes, bytes_per_element, check_dtype
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .roofline import arithmetic_intensity, limiter

# Thread-block tiles (rows x columns of C), largest first. The first eight are
# the seeds' cuBLAS list; the narrow ones serve skinny problems.
TILES = (
    (256, 128),
    (128, 256),
    (128, 128),
    (256, 64),
    (64, 256),
    (128, 64),
    (64, 128),
    (64, 64),
    (128, 32),
    (32, 128),
    (64, 32),
    (32, 64),
    (32, 32),
)
# A 256x128 tile fills one SM; smaller tiles share an SM, up to this many at once.
SM_TILE_AREA = 256 * 128
MAX_TILES_PER_SM = 8
SPLIT_K_FACTORS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
MIN_K_PER_SPLIT = 128
# Split-K partial sums are kept in fp32.
PARTIAL_SUM_BYTES = 4


@dataclass
class GemmResult:
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

    def to_dict(self) -> dict:
        return asdict(self)


def _ceil_div(a, b):
    return -(-a // b)


def alignment_verdicts(m: int, n: int, k: int, dtype: str, spec: HardwareSpec) -> dict[str, str]:
    """Per dimension: 'ok', or the multiple of elements it misses.

    Only meaningful where Tensor Cores run the dtype; CUDA-core GEMMs get 'ok'.
    """
    dims = {"m": m, "n": n, "k": k}
    if not spec.uses_tensor_cores(dtype):
        return dict.fromkeys(dims, "ok")
    need, best = spec.alignment_elements(dtype)
    out = {}
    for name, size in dims.items():
        if size % need:
            out[name] = f"not a multiple of {need}"
        elif size % best:
            out[name] = f"not a multiple of {best}"
        else:
            out[name] = "ok"
    return out


def _alignment_factor(m, n, k, spec: HardwareSpec, dtype: str):
    """Math-rate factor for Tensor Core alignment, elementwise over arrays."""
    need, best = spec.alignment_elements(dtype)
    eff = spec.efficiency
    missed = (m % need != 0) | (n % need != 0) | (k % need != 0)
    not_best = (m % best != 0) | (n % best != 0) | (k % best != 0)
    return np.where(
        missed,
        eff.misaligned_tensor_efficiency,
        np.where(not_best, eff.unaligned_best_efficiency, 1.0),
    )


def _dram_traffic(m, n, k, batch, in_bytes, out_bytes, tm, tn, per_sm, spec):
    """Bytes a tiled GEMM moves through DRAM.

    The tiles of one wave run through K roughly together, so each K-slice of
    an A row panel or a B column panel is fetched into L2 once per wave and
    shared by the wave's tiles. A wave covers a block of the output about
    `side` = sqrt(SMs x tiles per SM x tm x tn) on a side, so A is read once
    per block column and B once per block row. An operand that fits in half
    the L2 is read once whatever the shape.
    """
    side = np.sqrt(spec.sm_count * per_sm * tm * tn)
    a_bytes = in_bytes * m * k
    b_bytes = in_bytes * k * n
    half_l2 = spec.l2_cache_bytes / 2
    a_reads = np.where(a_bytes <= half_l2, 1.0, np.maximum(1.0, np.ceil(n / np.maximum(side, tn))))
    b_reads = np.where(b_bytes <= half_l2, 1.0, np.maximum(1.0, np.ceil(m / np.maximum(side, tm))))
    return batch * (a_bytes * a_reads + b_bytes * b_reads + out_bytes * m * n)


def predict_many(
    m,
    n,
    k,
    batch,
    spec: HardwareSpec,
    dtype: str,
    math_dtype: str | None = None,
    tile_shapes: tuple[tuple[int, int], ...] = TILES,
    split_factors: tuple[int, ...] = SPLIT_K_FACTORS,
    tensor_bytes=None,
):
    """Price many GEMMs at once (numpy arrays of sizes); the best candidate per row.

    Returns a dict of arrays: time_s, math_time_s, memory_time_s, latency_s,
    tile_m, tile_n (-1 on a CPU), split_k, tiles, waves, tile_efficiency,
    wave_efficiency. `gemm()` is this with one row. Narrow `tile_shapes` or
    `split_factors` to price one kernel choice (sweeps and tests do).
    `tensor_bytes` (per row, 0 for none) replaces the DRAM traffic where the
    operands are implicit: a convolution's im2col matrix is never stored, the
    kernel moves the tensors themselves.
    """
    m, n, k, batch = (np.asarray(x, dtype=np.int64) for x in (m, n, k, batch))
    if tensor_bytes is not None:
        tensor_bytes = np.asarray(tensor_bytes, dtype=float)
    dtype = check_dtype(dtype)
    math_dtype = check_dtype(math_dtype or dtype)
    unit = spec.unit(math_dtype)
    eff = spec.efficiency
    in_bytes = bytes_per_element(dtype)
    out_bytes = accumulator_bytes(dtype)
    base = eff.tensor_math_efficiency if unit.tensor_cores else eff.simt_math_efficiency
    clock_fraction = spec.sustained_clock_fraction(unit.tensor_cores)
    rate = unit.peak_flops_per_s * base * clock_fraction
    if unit.tensor_cores:
        rate = rate * _alignment_factor(m, n, k, spec, math_dtype)
    rate = np.broadcast_to(rate, m.shape).astype(float)
    unique = (batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)).astype(float)
    bandwidth = spec.memory_bandwidth_bytes_per_s * eff.dram_efficiency

    if spec.kind == "cpu":
        # A CPU has no thread-block tiles to count: plain roofline plus call latency.
        math_t = 2.0 * batch * m * n * k / rate
        mem_t = unique / bandwidth
        ones = np.ones_like(m)
        return {
            "time_s": eff.kernel_latency_s + np.maximum(math_t, mem_t),
            "math_time_s": math_t,
            "memory_time_s": mem_t,
            "latency_s": np.full(m.shape, eff.kernel_latency_s),
            "tile_m": -ones,
            "tile_n": -ones,
            "split_k": ones,
            "tiles": ones,
            "waves": ones,
            "tile_efficiency": ones.astype(float),
            "wave_efficiency": ones.astype(float),
        }

    sms = spec.sm_count
    fixed = eff.tile_fixed_cycles / (spec.clock_hz(unit.tensor_cores) * clock_fraction)
    best = None
    batched = batch > 1
    for tm, tn in tile_shapes:
        small = tm * tn < eff.batched_min_tile_area
        tiles_m, tiles_n = _ceil_div(m, tm), _ceil_div(n, tn)
        output_tiles = tiles_m * tiles_n * batch
        per_sm = max(1, min(MAX_TILES_PER_SM, SM_TILE_AREA // (tm * tn)))
        reuse = tm * tn / (tm + tn)
        sm_rate = rate / sms * (reuse / (reuse + eff.tile_reuse_knee))
        tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn)
        dram_traffic = _dram_traffic(m, n, k, batch, in_bytes, out_bytes, tm, tn, per_sm, spec)
        if tensor_bytes is not None:
            dram_traffic = np.where(tensor_bytes > 0, tensor_bytes, dram_traffic)
        for split in split_factors:
            k_split = _ceil_div(k, split)
            tiles = output_tiles * split
            waves = _ceil_div(tiles, sms * per_sm)
            math_t = _ceil_div(tiles, sms) * (2.0 * tm * tn * k_split / sm_rate) + waves * fixed
            moved = dram_traffic
            latency = np.full(m.shape, eff.kernel_latency_s)
            if split > 1:
                # fp32 partial sums written by the GEMM, read back by a reduction kernel.
                moved = dram_traffic + 2.0 * batch * m * n * split * PARTIAL_SUM_BYTES
                latency = latency + eff.kernel_latency_s
            busy = np.minimum(1.0, tiles / sms)
            mem_t = moved / (bandwidth * np.minimum(1.0, busy * eff.sm_bandwidth_share))
            time = latency + np.maximum(math_t, mem_t)
            if small and len(tile_shapes) > 1:
                # Batched GEMM heuristics do not offer the smallest tiles.
                time = np.where(batched, np.inf, time)
            if split > 1:
                # Split K only when the output alone cannot fill the SMs.
                allowed = (output_tiles < sms) & (k_split >= MIN_K_PER_SPLIT)
                time = np.where(allowed, time, np.inf)
            cand = {
                "time_s": time,
                "math_time_s": math_t,
                "memory_time_s": mem_t,
                "latency_s": latency,
                "tile_m": np.full(m.shape, tm),
                "tile_n": np.full(m.shape, tn),
                "split_k": np.full(m.shape, split),
                "tiles": tiles,
                "waves": waves,
                "tile_efficiency": tile_eff,
                "wave_efficiency": tiles / (waves * sms * per_sm),
            }
            if best is None:
                best = {key: np.array(np.broadcast_to(v, m.shape)) for key, v in cand.items()}
                continue
            better = cand["time_s"] < best["time_s"]
            for key, value in cand.items():
                best[key] = np.where(better, value, best[key])
    return best


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
    (fp16 data multiplied in fp32 on Pascal, say); it defaults to `dtype`.
    """
    _check_sizes(m, n, k, batch)
    dtype = check_dtype(dtype)
    spec = get_gpu(gpu)
    math_dtype = check_dtype(math_dtype or dtype)
    unit = spec.unit(math_dtype)
    row = {
        key: value.item()
        for key, value in predict_many(m, n, k, batch, spec, dtype, math_dtype).items()
    }  # noqa: E501

    flops = 2.0 * batch * m * n * k
    moved = float(
        batch * ((m * k + k * n) * bytes_per_element(dtype) + m * n * accumulator_bytes(dtype))
    )  # noqa: E501
    intensity = arithmetic_intensity(flops, moved)
    peak = unit.peak_flops_per_s
    ridge = peak / spec.memory_bandwidth_bytes_per_s
    time_s = row["time_s"]
    tile = (row["tile_m"], row["tile_n"]) if row["tile_m"] > 0 else None
    result = GemmResult(
        m=m,
        n=n,
        k=k,
        batch=batch,
        dtype=dtype,
        gpu=spec.id,
        flops=flops,
        bytes=moved,
        arithmetic_intensity=intensity,
        ridge_ops_per_byte=ridge,
        bound=gemm_bound(row, spec),
        time_s=time_s,
        achieved_flops_per_s=flops / time_s,
        fraction_of_peak=flops / time_s / peak,
        peak_flops_per_s=peak,
        tensor_cores=unit.tensor_cores,
        tile=f"{tile[0]}x{tile[1]}" if tile else "none",
        tiles=int(row["tiles"]),
        waves=int(row["waves"]),
        split_k=int(row["split_k"]),
        tile_efficiency=row["tile_efficiency"],
        wave_efficiency=row["wave_efficiency"],
        math_time_s=row["math_time_s"],
        memory_time_s=row["memory_time_s"],
        latency_s=row["latency_s"],
        alignment=alignment_verdicts(m, n, k, math_dtype, spec),
    )
    result.notes = _notes(result, spec, math_dtype)
    return result


# Fewer output tiles than this share of the SMs leaves the GPU mostly idle:
# the kernel is latency-limited whatever its arithmetic intensity.
STARVED_SM_SHARE = 0.25


def is_starved(tiles: int, spec: HardwareSpec) -> bool:
    """Whether a GEMM has too few tiles to occupy the device (never on a CPU)."""
    return spec.kind != "cpu" and tiles < spec.sm_count * STARVED_SM_SHARE


def gemm_bound(row: dict, spec: HardwareSpec) -> str:
    """The limiter of one priced GEMM row (`predict_many` output), by the one rule."""
    return limiter(
        row["math_time_s"],
        row["memory_time_s"],
        row["latency_s"],
        starved=is_starved(row["tiles"], spec),
    )


def _notes(r: GemmResult, spec: HardwareSpec, math_dtype: str) -> list[str]:
    notes = []
    if r.tensor_cores:
        need, best = spec.alignment_elements(math_dtype)
        for dim, verdict in r.alignment.items():
            size = getattr(r, dim)
            if verdict == f"not a multiple of {need}":
                notes.append(
                    f"{dim.upper()}={size} is not a multiple of {need}: Tensor Cores run "
                    f"below full efficiency (pad to {_ceil_div(size, need) * need})"
                )
            elif verdict != "ok":
                notes.append(
                    f"{dim.upper()}={size} is not a multiple of {best}: {spec.id} is most "
                    f"efficient with multiples of {best} (pad to {_ceil_div(size, best) * best})"
                )
    elif any(u.tensor_cores for u in spec.math.values()) and math_dtype in ("fp32", "fp64"):
        tc = [d for d, u in spec.math.items() if u.tensor_cores]
        notes.append(f"{math_dtype} runs on CUDA cores; Tensor Cores serve {', '.join(tc)}")
    if r.tile_efficiency < 0.9:
        notes.append(
            f"tile quantization: {r.tile} tiles cover {r.m}x{r.n} with "
            f"{(1 - r.tile_efficiency) * 100:.0f}% padding work"
        )
    if r.waves > 1 and r.wave_efficiency < 0.75:
        notes.append(
            f"wave quantization: {r.tiles} tiles in {r.waves} waves keep "
            f"{r.wave_efficiency * 100:.0f}% of the SM slots busy (the last wave is partial)"
        )
    elif r.waves == 1 and r.wave_efficiency < 0.5:
        notes.append(
            f"only {r.tiles} tiles of {r.tile}: one partial wave leaves "
            f"{(1 - r.wave_efficiency) * 100:.0f}% of the SM slots idle"
        )
    if r.split_k > 1:
        notes.append(f"split-K by {r.split_k}: too few output tiles to fill {spec.sm_count} SMs")
    if r.bound == "memory":
        side = "below" if r.arithmetic_intensity < r.ridge_ops_per_byte else "above"
        notes.append(
            f"memory-bound: moving its bytes takes longer than its math at attainable rates "
            f"({r.arithmetic_intensity:.1f} FLOPs/B, {side} the datasheet ridge "
            f"{r.ridge_ops_per_byte:.1f} of {spec.id})"
        )
    elif r.bound == "math" and r.arithmetic_intensity < r.ridge_ops_per_byte:
        notes.append(
            f"math-bound at attainable rates although {r.arithmetic_intensity:.1f} FLOPs/B is "
            f"below the datasheet ridge {r.ridge_ops_per_byte:.1f}: efficiency losses slow its "
            "math more than its memory traffic"
        )
    elif r.bound == "latency":
        notes.append("latency-bound: too little work to fill the GPU")
    return notes
