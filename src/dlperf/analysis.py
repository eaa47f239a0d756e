"""Trace + costs + timings -> Analysis: per op, per module, per category, per phase.

Every recorded call is costed by the op registry and timed by the hardware
model: GEMM-backed ops (matmuls, convolutions, attention, recurrent layers)
by the GEMM model, the rest as memory-bound kernels with the small-tensor
plateau. Ops no handler knows are listed in `unsupported_ops` and priced as
memory-bound on their inputs and outputs, never as free.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from .gemm import alignment_verdicts, is_starved, predict_many
from .hardware import HardwareSpec
from .ops import CATEGORIES, Cost, CostContext, Gemm, cost_of, fallback_cost
from .optimizer import optimizer_cost
from .precision import DTYPE_NAMES
from .roofline import arithmetic_intensity, limiter, streaming_terms
from .tracing import Trace


@dataclass
class GemmRow:
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

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class OpRow:
    module: str
    op: str
    phase: str
    category: str
    family: str
    shapes: list[list[int]]
    dtype: str
    flops: float
    bytes: float
    arithmetic_intensity: float
    bound: str
    time_s: float
    kernels: int
    layout: str = ""
    gemms: list[GemmRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    supported: bool = True

    @property
    def gemm_flops(self) -> float:
        """FLOPs of the op's GEMMs alone (no bias, softmax or gate arithmetic)."""
        return sum(2.0 * g.m * g.n * g.k * g.batch * g.count for g in self.gemms)

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "gemms"}
        out["gemms"] = [g.to_dict() for g in self.gemms]
        return out


class _GemmTimer:
    """Prices every distinct GEMM shape once, vectorized per dtype."""

    def __init__(self, spec: HardwareSpec):
        self.spec = spec
        self.cache: dict[tuple, dict] = {}

    def prepare(self, gemms: list[Gemm]) -> None:
        todo = defaultdict(set)
        for g in gemms:
            key = self.key(g)
            if key not in self.cache:
                todo[(g.storage, g.dtype)].add(key)
        for (storage, dtype), keys in todo.items():
            keys = sorted(keys)
            arr = np.array([k[:4] for k in keys], dtype=np.int64)
            moved = np.array([k[6] for k in keys], dtype=float)
            math = dtype if self.spec.has_dtype(dtype) else _fallback_dtype(self.spec, dtype)
            stored = (
                storage if storage in ("fp64", "fp32", "fp16", "bf16", "fp8", "int8") else "fp32"
            )
            res = predict_many(
                arr[:, 0],
                arr[:, 1],
                arr[:, 2],
                arr[:, 3],
                self.spec,
                stored,
                math,
                tensor_bytes=moved,
            )
            for i, key in enumerate(keys):
                self.cache[key] = {name: values[i].item() for name, values in res.items()}

    @staticmethod
    def key(g: Gemm) -> tuple:
        # tensor bytes are per GEMM call (the op's total over its count)
        return (g.m, g.n, g.k, g.batch, g.dtype, g.storage, g.tensor_bytes / g.count)

    def __call__(self, g: Gemm) -> dict:
        return self.cache[self.key(g)]


def _fallback_dtype(spec: HardwareSpec, dtype: str) -> str:
    """A dtype the device lacks runs on the nearest path it has (bf16 on V100 -> fp32)."""
    for candidate in ("fp16" if dtype == "bf16" else "", "fp32", *spec.math):
        if candidate and spec.has_dtype(candidate):
            return candidate
    return next(iter(spec.math))


def _shapes(event) -> list[list[int]]:
    return [list(t.shape) for t in event.tensors()]


def _dtype_of(event, cost: Cost) -> str:
    if cost.gemms:
        return cost.gemms[0].dtype
    ts = event.tensors() or list(event.outputs)
    return DTYPE_NAMES.get(ts[0].dtype, str(ts[0].dtype)) if ts else ""


def _layout(event) -> str:
    ts = [t for t in event.tensors() if len(t.shape) == 4]
    if not ts:
        return ""
    return "NHWC" if ts[0].channels_last else "NCHW"


def price_cost(cost: Cost, spec: HardwareSpec, dtype: str = "fp32", timer=None):
    """`time_cost` for a cost outside an analysis: prices its GEMMs first (in
    `timer`, when one is kept across calls)."""
    timer = timer or _GemmTimer(spec)
    timer.prepare(list(cost.gemms))
    return time_cost(cost, spec, timer, dtype)


def _cpu_eager_s(cost: Cost, spec: HardwareSpec, timer: _GemmTimer) -> float:
    """What eager PyTorch adds to an op on a CPU, where nothing overlaps the host:
    the per-call host cost, and convolutions' short dot products (0 elsewhere)."""
    if spec.kind != "cpu":
        return 0.0
    eff = spec.efficiency
    extra = eff.eager_call_overhead_s * max(1, cost.kernels)
    if cost.family == "conv" and eff.conv_reduction_knee > 0:
        for g in cost.gemms:
            r = timer(g)
            reduction = g.n if g.role == "wgrad" else g.k  # C*R*S (K*R*S for dgrad)
            math_s, memory_s = r["math_time_s"], r["memory_time_s"]
            slow = math_s * (reduction + eff.conv_reduction_knee) / reduction
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


def time_cost(cost: Cost, spec: HardwareSpec, timer: _GemmTimer, dtype: str = "fp32"):
    """(seconds, bound, gemm rows) of one costed op on `spec`.

    The bound follows `roofline.limiter`, the rule `dlperf gemm` uses: an op of
    one GEMM gets exactly the verdict of that GEMM.
    """
    eff = spec.efficiency
    if not cost.gemms:
        if not (cost.bytes or cost.flops):
            return 0.0, "latency", []
        math_s, memory_s, latency_s = streaming_terms(cost.bytes, spec, cost.flops, dtype)
        latency_s = float(latency_s) * cost.kernels
        memory_s = _cpu_cached_memory_s(cost.bytes, float(memory_s), spec)
        t = latency_s + float(max(math_s, memory_s)) + _cpu_eager_s(cost, spec, timer)
        return t, limiter(float(math_s), float(memory_s), latency_s), []
    rows, math_t, mem_t, lat_t, total = [], 0.0, 0.0, 0.0, 0.0
    starved = True
    bandwidth = spec.memory_bandwidth_bytes_per_s * eff.dram_efficiency
    for g in cost.gemms:
        r = timer(g)
        launches = g.launches or g.count  # a persistent kernel runs its GEMMs in one launch
        one = r["time_s"] * g.count - r["latency_s"] * (g.count - launches)
        total += one
        math_t += r["math_time_s"] * g.count
        mem_t += r["memory_time_s"] * g.count
        lat_t += r["latency_s"] * launches
        starved = starved and is_starved(r["tiles"], spec)
        tile = f"{r['tile_m']}x{r['tile_n']}" if r["tile_m"] > 0 else "none"
        align_dtype = g.dtype if spec.has_dtype(g.dtype) else _fallback_dtype(spec, g.dtype)
        rows.append(
            GemmRow(
                g.m,
                g.n,
                g.k,
                g.batch,
                g.count,
                g.dtype,
                g.role,
                tile,
                r["tile_efficiency"],
                r["wave_efficiency"],
                alignment_verdicts(g.m, g.n, g.k, align_dtype, spec),
                one,
                int(r["waves"]),
            )
        )
    # Bytes beyond the GEMMs' own (layout transposes of NCHW data) stream separately.
    gemm_bytes = sum(g.tensor_bytes for g in cost.gemms)
    extra = cost.bytes - gemm_bytes if cost.family == "conv" else 0.0
    if extra > 0:
        total += extra / bandwidth
        mem_t += extra / bandwidth
    total += _cpu_eager_s(cost, spec, timer)
    return total, limiter(math_t, mem_t, lat_t, starved=starved), rows


@dataclass
class Analysis:
    model: str
    gpu: str
    precision: str
    training: bool
    params: int
    batch: int
    tokens: int
    rows: list[OpRow]
    unsupported_ops: dict[str, int]
    spec: HardwareSpec = field(repr=False)
    optimizer: str = "adamw"
    view_ops: int = 0

    # -- aggregates ------------------------------------------------------
    @property
    def totals(self) -> dict:
        return {
            "flops": sum(r.flops for r in self.rows),
            "bytes": sum(r.bytes for r in self.rows),
            "time_s": sum(r.time_s for r in self.rows),
            "kernels": sum(r.kernels for r in self.rows),
        }

    @property
    def time_s(self) -> float:
        return self.totals["time_s"]

    @property
    def phases(self) -> dict:
        out = {}
        for phase in ("forward", "backward", "optimizer"):
            rows = [r for r in self.rows if r.phase == phase]
            if rows or phase == "forward":
                out[phase] = {
                    "flops": sum(r.flops for r in rows),
                    "bytes": sum(r.bytes for r in rows),
                    "time_s": sum(r.time_s for r in rows),
                }
        return out

    @property
    def categories(self) -> dict:
        out = {c: {"flops": 0.0, "time_s": 0.0} for c in CATEGORIES}
        for r in self.rows:
            entry = out.setdefault(r.category, {"flops": 0.0, "time_s": 0.0})
            entry["flops"] += r.flops
            entry["time_s"] += r.time_s
        return out

    def modules(self, depth: int = 2) -> dict[str, dict]:
        """Time and FLOPs per module path, cut at `depth` levels."""
        out: dict[str, dict] = {}
        for r in self.rows:
            parts = r.module.split(".") if r.module else ["(model)"]
            for level in range(1, min(depth, len(parts)) + 1):
                key = ".".join(parts[:level])
                entry = out.setdefault(key, {"flops": 0.0, "time_s": 0.0, "ops": 0})
                entry["flops"] += r.flops
                entry["time_s"] += r.time_s
                entry["ops"] += 1
        return out

    @property
    def contraction_dtype(self) -> str:
        rows = [r for r in self.rows if r.gemms]
        if not rows:
            return "fp32"
        weight = Counter()
        for r in rows:
            weight[r.dtype] += r.flops
        return weight.most_common(1)[0][0]

    @property
    def mfu(self) -> float:
        """Model FLOPs utilization: contraction FLOPs per second over the peak of their dtype."""
        flops = sum(r.flops for r in self.rows if r.category == "contraction")
        dtype = self.contraction_dtype
        if not self.time_s or not self.spec.has_dtype(dtype):
            return 0.0
        return flops / self.time_s / self.spec.peak_flops_per_s(dtype)

    @property
    def throughput(self) -> dict:
        if not self.time_s:
            return {}
        out = {"samples_per_s": self.batch / self.time_s}
        if self.tokens:
            out["tokens_per_s"] = self.tokens / self.time_s
        return out

    def top(self, n: int = 10) -> list[OpRow]:
        return sorted(self.rows, key=lambda r: r.time_s, reverse=True)[:n]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "precision": self.precision,
            "training": self.training,
            "params": self.params,
            "batch": self.batch,
            "optimizer": self.optimizer if self.training else None,
            "totals": self.totals,
            "throughput": self.throughput,
            "mfu": self.mfu,
            "phases": self.phases,
            "categories": self.categories,
            "modules": self.modules(depth=2),
            "ops": [r.to_dict() for r in self.rows],
            "unsupported_ops": dict(self.unsupported_ops),
        }


def analyze_trace(
    trace: Trace, spec: HardwareSpec, model_name: str = "model", optimizer: str = "adamw"
) -> Analysis:
    ctx = CostContext(trace.precision, spec)
    costed = []
    unsupported: Counter = Counter()
    views = 0
    for event in trace.events:
        cost = cost_of(event, ctx)
        if cost is None:
            unsupported[event.op] += 1
            cost = fallback_cost(event)
        elif cost.category == "view":
            views += 1
            continue
        costed.append((event, cost))
    if trace.training and optimizer:
        costed.append(optimizer_cost(trace, optimizer))
    timer = _GemmTimer(spec)
    timer.prepare([g for _, c in costed for g in c.gemms])
    rows = []
    for event, cost in costed:
        dtype = _dtype_of(event, cost)
        time_s, bound, gemm_rows = time_cost(
            cost, spec, timer, dtype if dtype in spec.math else "fp32"
        )
        rows.append(
            OpRow(
                module=event.module,
                op=event.op,
                phase=event.phase,
                category=cost.category,
                family=cost.family,
                shapes=_shapes(event),
                dtype=dtype,
                flops=cost.flops,
                bytes=cost.bytes,
                arithmetic_intensity=arithmetic_intensity(cost.flops, cost.bytes),
                bound=bound,
                time_s=time_s,
                kernels=cost.kernels,
                layout=_layout(event),
                gemms=gemm_rows,
                notes=list(cost.notes),
                supported=event.op not in unsupported,
            )
        )
    batch, tokens = _batch_and_tokens(trace)
    return Analysis(
        model=model_name,
        gpu=spec.id,
        precision=trace.precision.name,
        training=trace.training,
        params=trace.params,
        batch=batch,
        tokens=tokens,
        rows=rows,
        unsupported_ops=dict(unsupported),
        spec=spec,
        optimizer=optimizer,
        view_ops=views + trace.free_ops,
    )


def _batch_and_tokens(trace: Trace) -> tuple[int, int]:
    if not trace.inputs:
        return 1, 0
    first = trace.inputs[0]
    batch = first.shape[0] if first.shape else 1
    tokens = first.numel if (not first.is_float and len(first.shape) == 2) else 0
    return batch, tokens
