"""`dlperf trace`: how far each kernel of a real GPU run is from its roofline.

For every kernel whose launching op recorded its input shapes, the op's
FLOPs and bytes come from dlperf's op registry, its predicted time from the
hardware model, and the kernel's achieved FLOP/s and bytes/s are compared
with the roofline of the GPU (attainable = min(peak, intensity x bandwidth)).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from ..dtypes import name_of, runnable_dtype
from ..errors import DlperfError
from ..hardware import HardwareSpec, resolve_id
from ..hardware import gpu as get_gpu
from ..jsonable import Jsonable, fields_dict
from ..kernels.pricing import GemmTimer, time
from ..kernels.roofline import roofline_time_s
from ..ops import CostContext, cost_of
from ..precision import precision
from ..tracing import OpEvent, TensorMeta
from .kineto import Kernel, busy_time_us, read_trace

_TYPES = {
    "float": torch.float32,
    "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16,
    "double": torch.float64,
    "long int": torch.int64,
    "long": torch.int64,
    "short int": torch.int16,
    "short": torch.int16,
    "int": torch.int32,
    "bool": torch.bool,
    "unsigned char": torch.uint8,
    "signed char": torch.int8,
}
_SAME_SHAPE_OUT = (
    "aten::add",
    "aten::mul",
    "aten::div",
    "aten::sub",
    "aten::relu",
    "aten::gelu",
    "aten::silu",
    "aten::tanh",
    "aten::sigmoid",
    "aten::_softmax",
    "aten::softmax",
    "aten::native_layer_norm",
    "aten::layer_norm",
    "aten::threshold_backward",
    "aten::gelu_backward",
    "aten::native_dropout",
    "aten::copy_",
    "aten::add_",
    "aten::mul_",
    "aten::_log_softmax",
    "aten::clone",
    "aten::_to_copy",
)


@dataclass
class TraceRow(Jsonable):
    """The calls of one op with the same input shapes and dtype, priced on the roofline.

    FLOPs, bytes and times are totals over the `calls`; achieved rates are
    those totals over the measured kernel time.
    """

    kernel: str  # the longest kernel the calls launched
    op: str
    shapes: list
    dtype: str  # the first tensor's: the one the op computes in
    dtypes: list  # every tensor input's
    calls: int
    kernels: int
    time_s: float
    tensor_cores: bool
    flops: float
    bytes: float
    achieved_flops_per_s: float
    achieved_bytes_per_s: float
    predicted_time_s: float
    roofline_time_s: float  # the plain roofline: peak math rate, full bandwidth
    fraction_of_roofline: float  # roofline time over measured time; 1 is on the roof

    @property
    def time_above_roofline_s(self) -> float:
        return max(0.0, self.time_s - self.roofline_time_s)


@dataclass
class UnpricedRow(Jsonable):
    """Kernel time dlperf has no roofline figure for, summed per launching op."""

    op: str
    why: str
    calls: int
    kernels: int
    time_s: float
    kernel: str  # the longest kernel


@dataclass
class TraceReport:
    path: str
    gpu: str
    kernels: int
    gpu_busy_s: float
    gpu_idle_s: float
    steps: int
    tensor_core_kernels: int
    eligible_not_tensor_core_kernels: int
    rows: list[TraceRow] = field(default_factory=list)  # most time above the roofline first
    unpriced: list[UnpricedRow] = field(default_factory=list)  # most time first

    @property
    def unpriced_time_s(self) -> float:
        return sum(u.time_s for u in self.unpriced)

    def to_dict(self) -> dict:
        return fields_dict(self) | {"unpriced_time_s": self.unpriced_time_s}


def _tensor_inputs(op: dict) -> tuple | None:
    """Per recorded input, (shape, torch dtype) of a plain tensor or None; None
    when the op recorded no inputs. Priced calls are grouped by this."""
    args = op["args"]
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    out = []
    for shape, kind in zip(dims, types, strict=False):
        # tensor lists (nested dims), Python scalars and odd entries are not
        # priced inputs; a 0-d tensor ([] with a tensor type) is
        sizes = isinstance(shape, list) and all(_is_size(x) for x in shape)
        known = isinstance(kind, str) and kind in _TYPES
        out.append((tuple(shape), _TYPES[kind]) if sizes and known else None)
    return tuple(out)


def _event(name: str, inputs: tuple) -> OpEvent:
    metas = []
    for entry in inputs:
        if entry is None:
            metas.append(None)
            continue
        shape, dtype = entry
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        metas.append(TensorMeta(shape, dtype, tuple(reversed(strides))))
    outputs = _outputs(name, metas)
    return OpEvent(name.replace("::", ".") + ".default", tuple(metas), {}, outputs, "", "forward")


def _dtype_name(dtype: torch.dtype) -> str:
    return name_of(dtype)


def _is_size(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _outputs(name: str, metas: list) -> tuple:
    t = [m for m in metas if m is not None]
    if not t:
        return ()
    if name in ("aten::mm", "aten::addmm") and len(t) >= 2:
        a, b = t[-2], t[-1]
        return (TensorMeta((a.shape[0], b.shape[1]), a.dtype, (b.shape[1], 1)),)
    if name in ("aten::bmm", "aten::baddbmm") and len(t) >= 2:
        a, b = t[-2], t[-1]
        shape = (a.shape[0], a.shape[1], b.shape[2])
        return (TensorMeta(shape, a.dtype, (shape[1] * shape[2], shape[2], 1)),)
    if name in _SAME_SHAPE_OUT:
        return (t[0],)
    return ()


# Why kernel time has no roofline figure (kept short: they are table cells).
NO_LAUNCHING_OP = "(no launching op)"
NO_SHAPES = "no input shapes recorded"
COMMUNICATION = "communication (NCCL)"
NO_TENSORS = "inputs are tensor lists or scalars"
NO_COST = "no cost model for this op"
NO_LINK = "launch not inside a cpu_op"


@dataclass
class _Group:
    """Op calls that share a name, tensor inputs and Tensor Core use."""

    op: dict  # the first call; the others have the same name and tensor inputs
    inputs: tuple | None  # see _tensor_inputs
    calls: int = 0
    kernels: list[Kernel] = field(default_factory=list)


def analyze_profile(path, gpu: str | HardwareSpec | None = None) -> TraceReport:
    data = read_trace(path)
    if not data.kernels:
        raise DlperfError(
            f"{path} holds no GPU kernels (a CPU-only profile); record it on a GPU with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )
    if gpu is None:
        found = resolve_id(data.device_name) if data.device_name else None
        if not found:
            raise DlperfError(
                f"cannot tell the GPU of {path} (device {data.device_name!r}); pass --gpu"
            )
        gpu = found
    spec = get_gpu(gpu)
    busy = busy_time_us(data.kernels)
    span = max(k.start_us + k.duration_us for k in data.kernels) - min(
        k.start_us for k in data.kernels
    )
    groups, unlinked = _groups(data.kernels)
    costed, unpriced = [], []
    for g in groups.values():
        found = COMMUNICATION if _is_communication(g.kernels) else _cost(g, spec)
        if isinstance(found, str):
            unpriced.append(_unpriced(g.op["name"], found, g.calls, g.kernels))
        else:
            costed.append((g, *found))
    timer = GemmTimer(spec)
    timer.prepare([gemm for *_, cost in costed for gemm in cost.gemms])  # one batch per dtype
    rows = [_row(g, tensors, cost, spec, timer) for g, tensors, cost in costed]
    eligible_not_tc = sum(
        r.kernels
        for r in rows
        if _is_contraction(r.op) and not r.tensor_cores and _tensor_core_eligible(spec, r.dtype)
    )
    for kernels in unlinked.values():
        unpriced.append(_unpriced(NO_LAUNCHING_OP, NO_LINK, len(kernels), kernels))
    rows.sort(key=lambda r: r.time_above_roofline_s, reverse=True)
    unpriced = _merge_unpriced(unpriced)
    return TraceReport(
        str(path),
        spec.id,
        len(data.kernels),
        busy * 1e-6,
        max(0.0, span - busy) * 1e-6,
        data.steps,
        sum(k.tensor_cores for k in data.kernels),
        eligible_not_tc,
        rows,
        unpriced,
    )


def _groups(kernels: list[Kernel]) -> tuple[dict, dict]:
    """Kernels grouped by their launching op's name, tensor input shapes and
    dtypes and Tensor Core use (which decides TF32 pricing); unlinked ones by
    kernel name."""
    by_call: dict[int, list[Kernel]] = defaultdict(list)
    unlinked: dict[str, list[Kernel]] = defaultdict(list)
    for k in kernels:
        if k.op is None:
            unlinked[k.name].append(k)
        else:
            by_call[id(k.op)].append(k)
    groups: dict[tuple, _Group] = {}
    for launched in by_call.values():
        op = launched[0].op
        inputs = _tensor_inputs(op)
        key = (op["name"], inputs, any(k.tensor_cores for k in launched))
        group = groups.setdefault(key, _Group(op, inputs))
        group.calls += 1
        group.kernels.extend(launched)
    return groups, unlinked


def _unpriced(op: str, why: str, calls: int, kernels: list[Kernel]) -> UnpricedRow:
    longest = max(kernels, key=lambda k: k.duration_us)
    time_s = sum(k.duration_us for k in kernels) * 1e-6
    return UnpricedRow(op, why, calls, len(kernels), time_s, longest.name[:120])


def _merge_unpriced(rows: list[UnpricedRow]) -> list[UnpricedRow]:
    """One row per (op, reason): shapes do not matter to time without a price."""
    merged: dict[tuple, UnpricedRow] = {}
    for r in sorted(rows, key=lambda r: r.time_s, reverse=True):
        m = merged.get((r.op, r.why))
        if m is None:
            merged[(r.op, r.why)] = UnpricedRow(r.op, r.why, r.calls, r.kernels, r.time_s, r.kernel)
        else:
            m.calls, m.kernels, m.time_s = (
                m.calls + r.calls,
                m.kernels + r.kernels,
                m.time_s + r.time_s,
            )
    return sorted(merged.values(), key=lambda r: r.time_s, reverse=True)


def _is_communication(kernels: list[Kernel]) -> bool:
    return all(k.name.startswith("nccl") for k in kernels)


def _is_contraction(name: str) -> bool:
    return any(s in name for s in ("mm", "conv", "linear", "matmul", "attention"))


def _tensor_core_eligible(spec: HardwareSpec, dtype: str) -> bool:
    candidates = {"fp16", "bf16"} | ({"fp32"} if spec.has_dtype("tf32") else set())
    return dtype in candidates and any(u.tensor_cores for u in spec.math.values())


def _cost(g: _Group, spec: HardwareSpec):
    """(tensors, cost) of one call of the group, or why it cannot be priced."""
    if g.inputs is None:
        return NO_SHAPES
    event = _event(g.op["name"], g.inputs)
    tensors = [m for m in event.args if m is not None]
    if not tensors:
        return NO_TENSORS
    # fp32 GEMMs on Tensor Cores ran in TF32
    tc = tensors[0].dtype == torch.float32 and any(k.tensor_cores for k in g.kernels)
    try:
        cost = cost_of(event, CostContext(precision("tf32" if tc else "fp32")))
    except (IndexError, TypeError, ValueError, AttributeError, KeyError):
        cost = None  # recorded inputs that do not fit the handler's signature
    if cost is None or not (cost.flops or cost.bytes):
        return NO_COST
    return tensors, cost


def _row(g: _Group, tensors: list, cost, spec: HardwareSpec, timer) -> TraceRow:
    math_dtype = runnable_dtype(cost.gemms[0].dtype if cost.gemms else "fp32", spec)
    time_s = sum(k.duration_us for k in g.kernels) * 1e-6
    flops, moved = cost.flops * g.calls, cost.bytes * g.calls
    roof = g.calls * roofline_time_s(
        cost.flops, cost.bytes, spec.peak_flops_per_s(math_dtype), spec.memory_bandwidth_bytes_per_s
    )
    return TraceRow(
        max(g.kernels, key=lambda k: k.duration_us).name[:120],
        g.op["name"],
        [list(t.shape) for t in tensors],
        _dtype_name(tensors[0].dtype),
        [_dtype_name(t.dtype) for t in tensors],
        g.calls,
        len(g.kernels),
        time_s,
        any(k.tensor_cores for k in g.kernels),
        flops,
        moved,
        flops / time_s if time_s else 0.0,
        moved / time_s if time_s else 0.0,
        g.calls * time(cost, spec, math_dtype, timer).seconds,
        roof,
        roof / time_s if time_s else 0.0,
    )
