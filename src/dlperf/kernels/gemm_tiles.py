"""The GEMM kernel model: C[m, n] = A[m, k] B[k, n], optionally batched.

The output is split into thread-block tiles (the sizes cuBLAS picks among);
tiles run in waves over the SMs. The model prices every candidate tile and
split-K factor and keeps the fastest, as a library heuristic would:

    per-SM math rate = peak / SMs x math efficiency x tile reuse x alignment
                       (the largest tile held to the device's ceiling, the
                       others in proportion)
    math time        = ceil(tiles / SMs) x tile work / per-SM rate
                       + fixed tile cost x (1 + later waves x their share)
    memory time      = bytes / attainable bandwidth (less when few SMs are busy)
    kernel time      = kernel latency + max(math time, memory time)
                       + the output store the epilogue does not hide

Tile quantization (partial tiles compute padding) and wave quantization (the
last wave leaves SMs idle) fall out of the counting; see docs/hardware-model.md.
Everything works on numpy arrays, so that 100k GEMMs cost seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..dtypes import accumulator_bytes, bytes_per_element, check_dtype
from ..hardware import HardwareSpec

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
# Fewer output tiles than this share of the SMs leaves the GPU mostly idle:
# the kernel is latency-limited whatever its arithmetic intensity.
STARVED_SM_SHARE = 0.25


class GemmPrice(NamedTuple):
    """The priced kernel choice of a GEMM: numbers for one, numpy arrays for many
    (a named tuple: the model compares hundreds of candidates)."""

    time_s: object
    math_time_s: object
    memory_time_s: object
    latency_s: object
    tile_m: object  # -1 on a CPU (no thread-block tiles)
    tile_n: object
    split_k: object
    tiles: object
    waves: object
    tile_efficiency: object
    wave_efficiency: object

    @property
    def tile(self) -> str:
        """ "256x128", or "none" on a CPU (one GEMM)."""
        return f"{self.tile_m}x{self.tile_n}" if self.tile_m > 0 else "none"

    def rows(self) -> list[GemmPrice]:
        """One price of Python numbers per GEMM of an array price."""
        columns = [np.atleast_1d(values).tolist() for values in self]
        return [GemmPrice(*values) for values in zip(*columns, strict=True)]


def is_starved(tiles: int, spec: HardwareSpec) -> bool:
    """Whether a GEMM has too few tiles to occupy the device (never on a CPU)."""
    return spec.kind != "cpu" and tiles < spec.sm_count * STARVED_SM_SHARE


def _reuse(tm: int, tn: int) -> float:
    """Times a tile tm x tn reuses each element it loads: tm * tn / (tm + tn)."""
    return tm * tn / (tm + tn)


def _ceil_div(a, b):
    return -(-a // b)


def _alignment_factor(n, k, spec: HardwareSpec, dtype: str):
    """Math-rate factor for Tensor Core alignment, elementwise over arrays.

    Only N and K count: the kernels load A along K and B along K or N in
    16-byte vectors, so a row count M (the tokens of a linear layer) that is
    no multiple of 8 costs a partial tile, never narrower loads.
    """
    need, best = spec.alignment_elements(dtype)
    eff = spec.efficiency
    missed = (n % need != 0) | (k % need != 0)
    not_best = (n % best != 0) | (k % best != 0)
    return np.where(
        missed,
        eff.misaligned_tensor_efficiency,
        np.where(not_best, eff.unaligned_best_efficiency, 1.0),
    )


@dataclass(frozen=True)
class _Problem:
    """The GEMMs to price and the device terms every candidate shares."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    batch: np.ndarray
    spec: HardwareSpec
    in_bytes: int
    # per output element: bytes written, and read back first (a gradient summed in place)
    out_bytes: np.ndarray | float
    read_back_bytes: np.ndarray | float
    rate: np.ndarray  # attainable math rate of the whole device's main loops
    alignment: np.ndarray  # math-rate factor of Tensor Core alignment (1 off them)
    bandwidth: float
    fixed_s: float  # one tile's fixed cost
    reuse_knee: float  # the tile-reuse knee of this math path
    tensor_bytes: np.ndarray | None

    @classmethod
    def of(cls, m, n, k, batch, spec, dtype, math_dtype, tensor_bytes,
           accumulate_bytes=None) -> _Problem:  # fmt: skip
        m, n, k, batch = (np.asarray(x, dtype=np.int64) for x in (m, n, k, batch))
        if tensor_bytes is not None:
            tensor_bytes = np.asarray(tensor_bytes, dtype=float)
        out_bytes, read_back = accumulator_bytes(dtype), 0.0
        if accumulate_bytes is not None:
            summed = np.asarray(accumulate_bytes, dtype=float)
            out_bytes, read_back = np.where(summed > 0, summed, out_bytes), summed
        unit = spec.unit(math_dtype)
        eff = spec.efficiency
        base = eff.tensor_math_efficiency if unit.tensor_cores else eff.simt_math_efficiency
        clock_fraction = spec.sustained_clock_fraction(unit.tensor_cores)
        rate = unit.peak_flops_per_s * base * clock_fraction
        alignment = np.ones(m.shape)
        knee = eff.tile_reuse_knee
        if math_dtype == "tf32" and eff.tf32_tile_reuse_knee > 0:
            knee = eff.tf32_tile_reuse_knee
        if unit.tensor_cores:
            alignment = _alignment_factor(n, k, spec, math_dtype)
            # No GEMM runs faster than the device's ceiling: the largest tile's main
            # loop is held to it, and every smaller tile in proportion.
            best = _reuse(*TILES[0])
            ceiling = unit.peak_flops_per_s * clock_fraction * eff.tensor_ceiling_efficiency
            rate = min(rate, ceiling * (best + knee) / best)
        fixed = eff.tile_fixed_cycles / (spec.clock_hz(unit.tensor_cores) * clock_fraction)
        return cls(
            m,
            n,
            k,
            batch,
            spec,
            bytes_per_element(dtype),
            out_bytes,
            read_back,
            np.broadcast_to(rate, m.shape).astype(float),
            alignment,
            spec.sustained_bandwidth_bytes_per_s() * eff.dram_efficiency,
            fixed,
            knee,
            tensor_bytes,
        )

    def dram_traffic(self, tm: int, tn: int, per_sm: int):
        """Bytes a tiled GEMM moves through DRAM.

        The tiles of one wave run through K roughly together, so each K-slice of
        an A row panel or a B column panel is fetched into L2 once per wave and
        shared by the wave's tiles. A wave covers a block of the output about
        `side` = sqrt(SMs x tiles per SM x tm x tn) on a side, so A is read once
        per block column and B once per block row. An operand that fits in half
        the L2 is read once whatever the shape. Where the operands are implicit
        (`tensor_bytes`), the kernel moves the tensors themselves.
        """
        m, n, k, spec = self.m, self.n, self.k, self.spec
        side = np.sqrt(spec.sm_count * per_sm * tm * tn)
        a_bytes = self.in_bytes * m * k
        b_bytes = self.in_bytes * k * n
        half_l2 = spec.l2_cache_bytes / 2
        a_reads = np.where(
            a_bytes <= half_l2, 1.0, np.maximum(1.0, np.ceil(n / np.maximum(side, tn)))
        )
        b_reads = np.where(
            b_bytes <= half_l2, 1.0, np.maximum(1.0, np.ceil(m / np.maximum(side, tm)))
        )
        c_bytes = (self.out_bytes + self.read_back_bytes) * m * n
        traffic = self.batch * (a_bytes * a_reads + b_bytes * b_reads + c_bytes)
        if self.tensor_bytes is not None:
            traffic = np.where(self.tensor_bytes > 0, self.tensor_bytes, traffic)
        return traffic


def _cpu_price(p: _Problem) -> GemmPrice:
    """A CPU has no thread-block tiles to count: plain roofline plus call latency."""
    m, n, k, batch = p.m, p.n, p.k, p.batch
    latency = p.spec.efficiency.kernel_latency_s
    c_bytes = m * n * (p.out_bytes + p.read_back_bytes)
    unique = (batch * ((m * k + k * n) * p.in_bytes + c_bytes)).astype(float)
    math_t = 2.0 * batch * m * n * k / (p.rate * p.alignment)
    mem_t = unique / p.bandwidth
    ones = np.ones_like(m)
    return GemmPrice(
        time_s=latency + np.maximum(math_t, mem_t),
        math_time_s=math_t,
        memory_time_s=mem_t,
        latency_s=np.full(m.shape, latency),
        tile_m=-ones,
        tile_n=-ones,
        split_k=ones,
        tiles=ones,
        waves=ones,
        tile_efficiency=ones.astype(float),
        wave_efficiency=ones.astype(float),
    )


def _tile_prices(p: _Problem, tm: int, tn: int, split_factors, narrowed: bool):
    """The price of tile tm x tn with each split-K factor (inf where not offered),
    as tuples of the fields of `GemmPrice`."""
    spec, eff, m, n, k, batch = p.spec, p.spec.efficiency, p.m, p.n, p.k, p.batch
    sms = spec.sm_count
    # Batched GEMM heuristics do not offer the smallest tiles.
    refused_batched = tm * tn < eff.batched_min_tile_area and not narrowed
    tiles_m, tiles_n = _ceil_div(m, tm), _ceil_div(n, tn)
    output_tiles = tiles_m * tiles_n * batch
    per_sm = max(1, min(MAX_TILES_PER_SM, SM_TILE_AREA // (tm * tn)))
    reuse = _reuse(tm, tn)
    sm_rate = p.rate * (reuse / (reuse + p.reuse_knee)) * p.alignment / sms
    tile_eff = (m * n) / (tiles_m * tm * tiles_n * tn)
    dram_traffic = p.dram_traffic(tm, tn, per_sm)
    for split in split_factors:
        k_split = _ceil_div(k, split)
        tiles = output_tiles * split
        waves = _ceil_div(tiles, sms * per_sm)
        # Pipeline fill and epilogue: paid by the first wave; later waves pay a share
        # of it (persistent kernels overlap one tile's epilogue with the next's loads).
        fixed_t = p.fixed_s * (1.0 + (waves - 1) * eff.later_wave_fixed_share)
        math_t = _ceil_div(tiles, sms) * (2.0 * tm * tn * k_split / sm_rate) + fixed_t
        moved = dram_traffic
        latency = np.full(m.shape, eff.kernel_latency_s)
        if split > 1:
            # fp32 partial sums written by the GEMM, read back by a reduction kernel.
            moved = dram_traffic + 2.0 * batch * m * n * split * PARTIAL_SUM_BYTES
            latency = latency + eff.kernel_latency_s
        busy = np.minimum(1.0, tiles / sms)
        bandwidth = p.bandwidth * np.minimum(1.0, busy * eff.sm_bandwidth_share)
        mem_t = moved / bandwidth
        # The epilogue's store of a wave's outputs overlaps the next wave's main
        # loop only in part: the rest of the output's write adds to the time.
        store_t = eff.serial_store_share * batch * m * n * p.out_bytes / bandwidth
        time = latency + np.maximum(math_t, mem_t) + store_t
        if refused_batched:
            time = np.where(batch > 1, np.inf, time)
        if split > 1:
            # Split K only when the output alone cannot fill the SMs.
            allowed = (output_tiles < sms) & (k_split >= MIN_K_PER_SPLIT)
            time = np.where(allowed, time, np.inf)
        yield (
            time, math_t, mem_t, latency, np.full(m.shape, tm), np.full(m.shape, tn),
            np.full(m.shape, split), tiles, waves, tile_eff, tiles / (waves * sms * per_sm),
        )  # fmt: skip


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
    accumulate_bytes=None,
) -> GemmPrice:
    """Price many GEMMs at once (numpy arrays of sizes); the best candidate per row.

    Returns a `GemmPrice` of arrays; `.rows()` splits it into one price per
    GEMM. Narrow `tile_shapes` or `split_factors` to price one kernel choice
    (sweeps and tests do). `tensor_bytes` (per row, 0 for none) replaces the
    DRAM traffic where the operands are implicit: a convolution's im2col
    matrix is never stored, the kernel moves the tensors themselves.
    `accumulate_bytes` (per row, 0 for none): the output is a buffer of that
    many bytes per element, read and written (a gradient summed in place).
    """
    dtype = check_dtype(dtype)
    math_dtype = check_dtype(math_dtype or dtype)
    p = _Problem.of(m, n, k, batch, spec, dtype, math_dtype, tensor_bytes, accumulate_bytes)
    if spec.kind == "cpu":
        return _cpu_price(p)
    best = None  # the fields of GemmPrice, fastest candidate first
    for tm, tn in tile_shapes:
        for cand in _tile_prices(p, tm, tn, split_factors, narrowed=len(tile_shapes) == 1):
            if best is None:
                best = [np.array(np.broadcast_to(v, p.m.shape)) for v in cand]
                continue
            better = cand[0] < best[0]
            for i, value in enumerate(cand):
                best[i] = np.where(better, value, best[i])
    return GemmPrice(*best)
