"""Cost + device -> Timing: the one place a cost meets the hardware.

`time(cost, spec)` serves `dlperf gemm`, the analysis, the trace report and
the advice alike. GEMM-backed costs are priced GEMM by GEMM by the tile
model (`gemm_tiles`), each distinct shape once (`GemmTimer`); the rest as
memory-bound kernels with the small-tensor plateau (`roofline`). The hints
a handler leaves (NCHW data to transpose, an input to re-read unless it fits
on chip) are resolved here, with the spec, into bytes and `Loss` records.
A fused attention call is priced as the kernel the device's SDPA dispatcher
picks (`kernels.attention`): launch latency + max(FLOPs at the backend's
fraction of peak over its waves, bytes at the attainable bandwidth); the
math path as its GEMMs and L x S traffic. The limiter is `roofline.limiter`,
the one rule.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..costs import Cost, Gemm
from ..dtypes import runnable_dtype
from ..hardware import HardwareSpec
from ..jsonable import Jsonable
from ..kinds import Bound
from .attention import BLOCK_ROWS, KERNEL_NAMES, choose_backend, fused_terms, math_cost
from .gemm_tiles import GemmPrice, is_starved, predict_many
from .losses import (
    ONE_WAVE_NOTED_BELOW,
    WAVES_NOTED_BELOW,
    LatencyLoss,
    LayoutLoss,
    Loss,
    RereadLoss,
    WaveLoss,
    alignment_losses,
    alignment_verdicts,
    quantization_losses,
)
from .quantized import GEMV_ROLE, dequant_s, gemv_terms
from .roofline import limiter, streaming_terms

__all__ = ["GemmRow", "GemmTimer", "Loss", "Timing", "on_chip_bytes", "time"]


@dataclass
class GemmRow(Jsonable):
    """One GEMM of a priced op, as the analysis reports it."""

    m: int
    n: int
    k: int
    batch: int
    count: int
    dtype: str
    role: str
    tile: str
    tile_efficiency: float
    wave_efficiency: float
    alignment: dict[str, str]
    time_s: float
    waves: int = 1


class Timing(NamedTuple):
    """How long a cost takes on a device, which term sets it, and what it loses
    (a named tuple: analyses make one per op, and it is the cheapest immutable value)."""

    seconds: float
    math_s: float
    memory_s: float
    latency_s: float
    bound: Bound
    # Bytes moved as priced: the cost's own, plus the hints the device applies.
    bytes: float
    losses: tuple[Loss, ...] = ()
    gemms: tuple[GemmRow, ...] = ()
    # What pricing decided for the reader (which attention kernel runs, and why).
    note: str = ""


class GemmTimer:
    """Prices every distinct GEMM shape once, vectorized per dtype; keep one
    across calls to share the work."""

    def __init__(self, spec: HardwareSpec):
        self.spec = spec
        self.cache: dict[tuple, GemmPrice] = {}
        self._findings: dict[tuple, tuple] = {}

    def prepare(self, gemms) -> None:
        todo = defaultdict(set)
        for g in gemms:
            key = self.key(g)
            if key not in self.cache:
                todo[(g.storage, g.dtype)].add(key)
        for (storage, dtype), keys in todo.items():
            keys = sorted(keys)
            sizes = np.array([key[:4] for key in keys], dtype=np.int64)
            moved = np.array([key[6] for key in keys], dtype=float)
            summed = np.array([key[7] for key in keys], dtype=float)
            math = runnable_dtype(dtype, self.spec)
            prices = predict_many(*sizes.T, self.spec, storage, math, tensor_bytes=moved,
                                  accumulate_bytes=summed)
            self.cache.update(zip(keys, prices.rows(), strict=True))

    @staticmethod
    def key(g: Gemm) -> tuple:
        # tensor bytes are per GEMM call (the op's total over its count)
        return (g.m, g.n, g.k, g.batch, g.dtype, g.storage, g.tensor_bytes / g.count,
                g.accumulate_bytes)

    def __call__(self, g: Gemm) -> GemmPrice:
        key = self.key(g)
        if key not in self.cache:
            self.prepare([g])
        return self.cache[key]

    def findings(self, g: Gemm, index: int) -> tuple[GemmPrice, dict, tuple[Loss, ...], bool]:
        """(price, alignment verdicts, losses, starved) of GEMM number `index` of an op."""
        key = (self.key(g), index)
        found = self._findings.get(key)
        if found is None:
            p, spec = self(g), self.spec
            alignment = alignment_losses(g.m, g.n, g.k, runnable_dtype(g.dtype, spec), spec, index)
            losses = (*alignment, *quantization_losses(p, g.m, g.n, index))
            found = (p, alignment_verdicts(alignment), losses, is_starved(p.tiles, spec))
            self._findings[key] = found
        return found


def on_chip_bytes(spec: HardwareSpec) -> float:
    """What a persistent kernel can keep on chip: every SM's share."""
    return spec.sm_count * spec.efficiency.on_chip_bytes_per_sm


_LATENCY = Bound.LATENCY
# Records are frozen: every latency-bound op can share these.
_LATENCY_LOSS = {starved: LatencyLoss(starved=starved) for starved in (False, True)}


def _runs_on_tensor_cores(spec: HardwareSpec, dtype: str) -> bool:
    unit = spec.math.get(dtype)
    return unit is not None and unit.tensor_cores


def _hints(cost: Cost, spec: HardwareSpec) -> tuple[Loss, ...]:
    """The hints of a cost that apply on this device, as losses with their bytes."""
    found = []
    layout = cost.layout_transpose_bytes
    if layout and cost.gemms and _runs_on_tensor_cores(spec, cost.gemms[0].dtype):
        found.append(LayoutLoss(bytes=layout))
    if cost.reread_bytes and cost.working_set_bytes > on_chip_bytes(spec):
        found.append(
            RereadLoss(
                bytes=cost.reread_bytes,
                working_set_bytes=cost.working_set_bytes,
                on_chip_bytes=on_chip_bytes(spec),
            )
        )
    return tuple(found)


def _cpu_eager_s(cost: Cost, spec: HardwareSpec, timer: GemmTimer) -> float:
    """What eager PyTorch adds to an op on a CPU, where nothing overlaps the host:
    the per-call host cost, and convolutions' short dot products (0 elsewhere)."""
    if spec.kind != "cpu":
        return 0.0
    eff = spec.efficiency
    extra = eff.eager_call_overhead_s * max(1, cost.kernels)
    if eff.conv_reduction_knee > 0:
        for g in cost.gemms:
            if not g.conv_reduction:
                continue
            p = timer(g)
            math_s, memory_s = p.math_time_s, p.memory_time_s
            slow = math_s * (g.conv_reduction + eff.conv_reduction_knee) / g.conv_reduction
            extra += (max(slow, memory_s) - max(math_s, memory_s)) * g.count
    return extra


def _cpu_cached_memory_s(moved: float, memory_s: float, spec: HardwareSpec) -> float:
    """Memory time of a CPU kernel whose bytes are partly in the last-level cache:
    a share 1 - bytes/cache of them (what its producers just wrote) streams faster."""
    speedup = spec.efficiency.llc_streaming_speedup
    if spec.kind != "cpu" or speedup <= 1 or not spec.l2_cache_bytes:
        return memory_s
    cached = max(0.0, 1.0 - moved / spec.l2_cache_bytes)
    return memory_s * (1.0 - cached + cached / speedup)


def _streaming(cost: Cost, spec, dtype, timer, eager: bool, hints: tuple[Loss, ...]) -> Timing:
    """A kernel with no GEMM: memory-bound, with the small-tensor plateau."""
    moved = cost.bytes + sum(h.bytes for h in hints) if hints else cost.bytes
    if not (moved or cost.flops):
        return Timing(0.0, 0.0, 0.0, 0.0, _LATENCY, moved)
    math_s, memory_s, latency_s = streaming_terms(moved, spec, cost.flops, dtype)
    latency_s = float(latency_s) * cost.kernels
    memory_s = float(memory_s)
    if spec.kind == "cpu":
        memory_s = _cpu_cached_memory_s(moved, memory_s, spec)
    seconds = latency_s + max(math_s, memory_s)
    if eager and spec.kind == "cpu":
        seconds += _cpu_eager_s(cost, spec, timer)
    bound = limiter(math_s, memory_s, latency_s)
    if bound is _LATENCY:
        hints = (*hints, _LATENCY_LOSS[False])
    return Timing(seconds, math_s, memory_s, latency_s, bound, moved, hints)


def _gemms(cost: Cost, spec, timer, eager: bool, hints: list[Loss]) -> Timing:
    """A GEMM-backed op: its GEMMs priced by the tile model, then the bytes it
    moves outside them (a bias gradient, NCHW transposes) streamed after them."""
    rows, losses = [], [*hints]
    math_s = memory_s = latency_s = seconds = 0.0
    starved = True
    for i, g in enumerate(cost.gemms):
        p, verdicts, found, short = timer.findings(g, i)
        launches = g.launches or g.count  # a persistent kernel runs its GEMMs in one launch
        one = p.time_s * g.count - p.latency_s * (g.count - launches)
        if g.weight_bits:  # weight tiles dequantized on CUDA cores before the MMAs
            dequant = dequant_s(spec, g.k * g.n * g.batch, g.weight_bits, g.m) * g.count
            one += dequant
            math_s += dequant
        seconds += one
        math_s += p.math_time_s * g.count
        memory_s += p.memory_time_s * g.count
        latency_s += p.latency_s * launches
        starved = starved and short
        losses += found
        rows.append(
            GemmRow(
                g.m, g.n, g.k, g.batch, g.count, g.dtype, g.role, p.tile, p.tile_efficiency,
                p.wave_efficiency, dict(verdicts), one, int(p.waves),
            )
        )  # fmt: skip
    moved = cost.bytes
    extra = cost.side_bytes
    if hints:
        moved += sum(h.bytes for h in hints)
        extra += sum(h.bytes for h in hints)
    if extra > 0:
        bandwidth = spec.sustained_bandwidth_bytes_per_s() * spec.efficiency.dram_efficiency
        streamed = extra / bandwidth
        seconds += streamed
        memory_s += streamed
    if eager and spec.kind == "cpu":
        seconds += _cpu_eager_s(cost, spec, timer)
    bound = limiter(math_s, memory_s, latency_s, starved=starved)
    if bound is _LATENCY:
        losses.append(_LATENCY_LOSS[starved])
    return Timing(seconds, math_s, memory_s, latency_s, bound, moved, tuple(losses), tuple(rows))


def _weight_only_gemv(cost: Cost, spec: HardwareSpec) -> Timing:
    """A few-token weight-only GEMM: the CUDA-core GEMV that streams its weights
    and dequantizes them (`quantized.gemv_terms`), one launch each."""
    memory_s = alu_s = 0.0
    for g in cost.gemms:
        mem, alu = gemv_terms(
            spec, g.k * g.n * g.batch, g.weight_bits, g.m, g.tensor_bytes / g.count
        )
        memory_s += mem * g.count
        alu_s += alu * g.count
    latency_s = spec.efficiency.kernel_latency_s * sum(g.launches or g.count for g in cost.gemms)
    seconds = latency_s + memory_s + alu_s
    bound = limiter(alu_s, memory_s, latency_s)
    losses = (_LATENCY_LOSS[False],) if bound is _LATENCY else ()
    note = f"weight-only int{cost.gemms[0].weight_bits} GEMV on CUDA cores: dequantized in turn"
    return Timing(seconds, alu_s, memory_s, latency_s, bound, cost.bytes, losses, (), note)


def _fused_attention(shape, backend: str, spec: HardwareSpec, eager: bool) -> Timing:
    """One fused attention kernel: its launch, then the longer of its math (over
    its waves of thread blocks) and its memory traffic."""
    terms = fused_terms(spec, shape, backend)
    losses = []
    few = terms.waves > 1 and terms.wave_efficiency < WAVES_NOTED_BELOW
    if few or (terms.waves == 1 and terms.wave_efficiency < ONE_WAVE_NOTED_BELOW):
        losses.append(
            WaveLoss(
                efficiency=terms.wave_efficiency,
                tile=f"{BLOCK_ROWS}-row",
                tiles=terms.blocks,
                waves=terms.waves,
            )
        )
    seconds = terms.latency_s + max(terms.math_s, terms.memory_s)
    if eager and spec.kind == "cpu":
        seconds += spec.efficiency.eager_call_overhead_s
    bound = limiter(terms.math_s, terms.memory_s, terms.latency_s)
    return Timing(
        seconds, terms.math_s, terms.memory_s, terms.latency_s, bound, shape.bytes, tuple(losses)
    )


def _attention(cost: Cost, spec: HardwareSpec, timer: GemmTimer, eager: bool) -> Timing:
    """Attention calls, each as the kernel the device's SDPA dispatcher picks;
    the note says which and why."""
    parts, notes = [], []
    for shape in cost.attention:
        backend, why = choose_backend(spec, shape, shape.requested)
        notes.append(f"attention: {backend}, {KERNEL_NAMES[backend]} ({why})")
        if backend == "math":
            found = _gemms(math_cost(spec, shape), spec, timer, eager, [])
            if shape.dropout and shape.phase == "forward":  # its mask, drawn per score
                scores = shape.batch * shape.heads * shape.q_len * shape.kv_len
                found = found._replace(seconds=found.seconds + random_s(scores, spec))
            parts.append(found)
        else:
            parts.append(_fused_attention(shape, backend, spec, eager))
    seconds, math_s, memory_s, latency_s, moved = (
        sum(getattr(p, name) for p in parts)
        for name in ("seconds", "math_s", "memory_s", "latency_s", "bytes")
    )
    bound = limiter(math_s, memory_s, latency_s)
    losses = [loss for p in parts for loss in p.losses if not isinstance(loss, LatencyLoss)]
    if bound is _LATENCY:
        losses.append(_LATENCY_LOSS[False])
    rows = tuple(row for p in parts for row in p.gemms)
    note = "; ".join(dict.fromkeys(notes))
    return Timing(seconds, math_s, memory_s, latency_s, bound, moved, tuple(losses), rows, note)


# glibc's malloc takes blocks of this size and up straight from the OS (mmap:
# DEFAULT_MMAP_THRESHOLD_MAX on 64-bit Linux) and gives them back on free, and
# PyTorch's CPU allocator keeps no cache: each such tensor a step allocates
# comes as fresh pages, which the OS faults in and zeroes on the first write.
CPU_FRESH_PAGES_BYTES = 32 * 2**20


def first_touch_s(fresh_bytes: float, spec: HardwareSpec) -> float:
    """Time a CPU spends faulting in and zeroing `fresh_bytes` of new pages at
    its probed rate (0 on a GPU: the caching allocator reuses its blocks)."""
    rate = spec.efficiency.first_touch_bytes_per_s
    return fresh_bytes / rate if spec.kind == "cpu" and rate > 0 and fresh_bytes else 0.0


# Ops that draw a random number per element: dropout's mask on a CPU. PyTorch's CPU
# generator makes them one at a time, far below the streaming rate; a GPU's Philox
# kernels keep up with memory, so its ops stay memory-bound.
RANDOM_OPS = ("aten.bernoulli_", "aten.bernoulli")


def random_s(elements: float, spec: HardwareSpec) -> float:
    """Time a CPU spends drawing `elements` random numbers at its probed rate
    (`efficiency.random_elements_per_s`; 0 on a GPU)."""
    rate = spec.efficiency.random_elements_per_s
    return elements / rate if spec.kind == "cpu" and rate > 0 and elements else 0.0


def _kernel_kind(cost: Cost, spec: HardwareSpec) -> str:
    """Which kernel family prices `cost` on `spec` (a key of `_PRICERS`)."""
    if cost.attention:
        return "attention"
    if not cost.gemms:
        return "memory-bound"
    if cost.gemms[0].role == GEMV_ROLE and spec.kind != "cpu":
        return "gemv"
    return "gemm"


def _applying_hints(cost: Cost, spec: HardwareSpec) -> tuple[Loss, ...]:
    return _hints(cost, spec) if cost.layout_transpose_bytes or cost.reread_bytes else ()


# Each kernel family's price of a cost: (cost, spec, dtype, timer, eager) -> Timing.
_PRICERS = {
    "attention": lambda cost, spec, dtype, timer, eager: _attention(cost, spec, timer, eager),
    "gemv": lambda cost, spec, dtype, timer, eager: _weight_only_gemv(cost, spec),
    "gemm": lambda cost, spec, dtype, timer, eager: _gemms(
        cost, spec, timer, eager, _applying_hints(cost, spec)
    ),
    "memory-bound": lambda cost, spec, dtype, timer, eager: _streaming(
        cost, spec, runnable_dtype(dtype, spec), timer, eager, _applying_hints(cost, spec)
    ),
}


def time(
    cost: Cost,
    spec: HardwareSpec,
    dtype: str = "fp32",
    timer: GemmTimer | None = None,
    eager: bool = True,
    op: str | None = None,
    layer: str | None = None,
    cpu_extra_s: float = 0.0,
) -> Timing:
    """The time of one costed op on `spec`.

    `dtype` is the dtype of a memory-bound kernel's arithmetic (a device that
    lacks it runs the nearest it has); GEMMs carry their own. `timer` keeps
    GEMM prices across calls. `eager` adds what an eager framework call costs
    on a device where the host does not overlap it (a CPU); a bare kernel
    (`dlperf gemm`) has none. An op of one GEMM gets exactly that GEMM's verdict.
    A spec calibrated on a trace corrects the time by the kernel's class, by
    `op` (the event's name) or by `layer` (`calibration.layer_keys`) where
    the trace measured that op or that very layer. `cpu_extra_s` is what a CPU
    adds to the op's kernel: its new outputs' fresh pages (`first_touch_s`)
    and its random numbers (`random_s`).
    """
    timer = timer or GemmTimer(spec)
    kernel = _kernel_kind(cost, spec)
    found = _PRICERS[kernel](cost, spec, dtype, timer, eager)
    # a calibration's classes: a weight-only GEMV is a GEMM there
    kind = "gemm" if kernel == "gemv" else kernel
    if cpu_extra_s:
        found = found._replace(seconds=found.seconds + cpu_extra_s)
    if spec.calibration is None or not found.seconds:
        return found
    seconds = spec.calibration.seconds(
        found.seconds, kind, cost.flops, cost.kernels, op, eager, layer
    )
    return found._replace(seconds=seconds)
