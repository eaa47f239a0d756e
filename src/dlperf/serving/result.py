"""What `dlperf serve` reports: the request's times, the deployment's
throughput, memory per GPU, and per phase the ops that take the time and
what bounds them (decode at small batch reads weights; the batch from which
its linear layers turn math-bound)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from ..dtypes import bytes_per_element, runnable_dtype
from ..jsonable import fields_dict
from ..kernels.quantized import GEMV_ROLE
from ..kernels.roofline import arithmetic_intensity, ridge_point
from ..kinds import Bound
from .quant import Scheme, quantized_role

TOP_OPS = 8
# Batch sizes tried for the decode's turn to math (powers of two).
CROSSOVER_BATCHES = tuple(2**i for i in range(15))


@dataclass
class PhaseReport:
    """One phase (prefill, or the mean decode step) on one GPU."""

    time_s: float
    tokens: int  # new tokens per step, all sequences
    flops: float  # per GPU
    bytes: float  # per GPU
    weight_bytes: float  # read by the linear layers' GEMMs, per GPU
    comm_s: float  # collectives on the critical path
    bound: str  # the bound that carries most of the GPU time
    top_ops: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The fields, with the phase's `extra` figures beside them rather than nested."""
        return fields_dict(self, skip=("extra",)) | self.extra


@dataclass
class ServeReport:
    model: str
    gpu: str
    precision: str
    kv_cache_dtype: str
    batch: int
    input_len: int
    output_len: int
    tp: int
    pp: int
    ttft_s: float
    tpot_s: float
    latency_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    memory: dict  # per GPU: weights, KV cache, activations, workspace, total
    kv_cache_bytes_per_token: float  # whole model, one sequence
    kv_cache_bytes_per_token_per_gpu: float
    fits: bool
    max_batch: int
    prefill: PhaseReport
    decode: PhaseReport
    cuda_graphs: bool = False
    concurrency: dict | None = None
    speculative: dict | None = None  # the speculative-decoding what-if (`speculative`)
    notes: list[str] = field(default_factory=list)
    unsupported_ops: dict = field(default_factory=dict)
    # every GPU's joules for a request's tokens, per output token (`kernels.energy`)
    energy_per_output_token_j: float | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory["total_bytes"]

    def to_dict(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "model", "gpu", "precision", "kv_cache_dtype", "batch", "input_len",
                "output_len", "tp", "pp", "gpus", "cuda_graphs", "ttft_s", "tpot_s",
                "latency_s", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
                "memory_per_gpu_bytes", "kv_cache_bytes_per_token",
                "kv_cache_bytes_per_token_per_gpu", "fits", "max_batch",
                "energy_per_output_token_j",
            )
        }  # fmt: skip
        out["memory_per_gpu"] = dict(self.memory)
        out["prefill"] = self.prefill.to_dict()
        out["decode"] = self.decode.to_dict()
        out["concurrency"] = self.concurrency
        out["speculative"] = self.speculative
        out["notes"] = list(self.notes)
        out["unsupported_ops"] = dict(self.unsupported_ops)
        return out


_INDEX = re.compile(r"\.\d+(?=\.|$)")


def top_ops(rows, step_s: float, n: int = TOP_OPS) -> list[dict]:
    """The ops that take the most time, the repeated blocks' copies summed
    (module paths with their layer index as `*`)."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        key = (_INDEX.sub(".*", r.module), r.op)
        g = groups.setdefault(key, {"time_s": 0.0, "count": 0, "rows": defaultdict(float)})
        g["time_s"] += r.time_s
        g["count"] += 1
        g["rows"][str(r.bound)] += r.time_s
    ranked = sorted(groups.items(), key=lambda kv: kv[1]["time_s"], reverse=True)[:n]
    return [
        {
            "module": module,
            "op": op,
            "count": g["count"],
            "time_s": g["time_s"],
            "share": g["time_s"] / step_s if step_s else 0.0,
            "bound": max(g["rows"], key=g["rows"].get),
        }
        for (module, op), g in ranked
    ]


def bound_of(rows) -> str:
    """The bound that carries the most GPU time among the rows."""
    by = defaultdict(float)
    for r in rows:
        by[str(r.bound)] += r.time_s
    return max(by, key=by.get) if by else str(Bound.LATENCY)


_LINEAR_OPS = ("aten.mm.default", "aten.addmm.default")


def linear_rows(rows):
    """Rows of linear layers' GEMMs (their B operand a weight)."""
    return [r for r in rows if r.op in _LINEAR_OPS and getattr(r, "weight_gemms", ())]


def linear_flops(rows) -> float:
    return float(sum(g.flops for r in linear_rows(rows) for g in r.weight_gemms))


def weight_bytes_read(rows, scheme: Scheme) -> float:
    """Bytes of weights the linear GEMMs read in a step (on one GPU)."""
    total = 0.0
    for r in linear_rows(rows):
        for g in r.weight_gemms:
            quantized = g.role in (quantized_role(scheme), GEMV_ROLE)
            per = scheme.weight_bytes if quantized else bytes_per_element(scheme.base)
            total += g.k * g.n * per * g.count * g.batch
    return total


def linear_share(rows) -> float:
    """Share of the step's GPU time spent in the linear layers' GEMMs (below
    the ridge batch, reading their weights)."""
    total = sum(r.time_s for r in rows)
    return sum(r.time_s for r in linear_rows(rows)) / total if total else 0.0


def math_bound_from(rows, spec, scheme: Scheme) -> int | None:
    """The smallest batch (a power of two) at which the decode's linear layers
    turn math-bound: their arithmetic intensity, FLOPs over the bytes of
    weights, activations and outputs at the precision's sizes, reaches the
    GPU's ridge point (attainable math rate over attainable bandwidth, the
    guides' ops:byte ratio). None beyond the largest batch tried."""
    shapes = defaultdict(int)
    for r in linear_rows(rows):
        for g in r.weight_gemms:
            shapes[(g.n, g.k)] += g.count
    if not shapes:
        return None
    eff = spec.efficiency
    # the attainable rate of a large GEMM: its main loop, held to the device's ceiling
    dtype = runnable_dtype(scheme.gemm_dtype, spec)
    efficiency = eff.tensor_math_efficiency
    if spec.uses_tensor_cores(dtype):
        efficiency = min(efficiency, eff.tensor_ceiling_efficiency)
    rate = spec.peak_flops_per_s(dtype) * efficiency * spec.sustained_clock_fraction(True)
    ridge = ridge_point(rate, spec.sustained_bandwidth_bytes_per_s() * eff.dram_efficiency)
    out_bytes = bytes_per_element(scheme.base)
    for batch in CROSSOVER_BATCHES:
        flops = moved = 0.0
        for (n, k), count in shapes.items():
            flops += 2.0 * batch * n * k * count
            moved += count * (
                k * n * scheme.weight_bytes
                + batch * k * scheme.activation_bytes
                + batch * n * out_bytes
            )
        if arithmetic_intensity(flops, moved) >= ridge:
            return batch
    return None
