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

from ..analysis import _GemmTimer, price_cost
from ..errors import DlperfError
from ..hardware import HardwareSpec, resolve_id
from ..hardware import gpu as get_gpu
from ..ops import CostContext, cost_of
from ..precision import DTYPE_NAMES, precision
from ..roofline import roofline_time_s
from ..tracing import OpEvent, TensorMeta
from .kineto import Kernel, busy_time_us, read_trace

_TYPES = {
    "float": torch.float32,
    "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16,
    "double": torch.float64,
    "long int": torch.int64,
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
class TraceRow:
    kernel: str
    op: str
    shapes: list
    dtype: str
    time_s: float
    kernels: int
    tensor_cores: bool
    flops: float | None = None
    bytes: float | None = None
    achieved_flops_per_s: float | None = None
    achieved_bytes_per_s: float | None = None
    predicted_time_s: float | None = None
    fraction_of_roofline: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
    rows: list[TraceRow] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "rows"}
        out["rows"] = [r.to_dict() for r in self.rows]
        return out


def _event(op: dict) -> OpEvent | None:
    args = op.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    metas = []
    for shape, kind in zip(dims, types, strict=False):
        if isinstance(shape, list) and shape and kind in _TYPES:
            strides, step = [], 1
            for size in reversed(shape):
                strides.append(step)
                step *= max(int(size), 1)
            metas.append(
                TensorMeta(tuple(int(s) for s in shape), _TYPES[kind], tuple(reversed(strides)))
            )
        else:
            metas.append(None)
    name = op["name"]
    outputs = _outputs(name, metas)
    return OpEvent(name.replace("::", ".") + ".default", tuple(metas), {}, outputs, "", "forward")


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


def analyze_profile(path, gpu: str | HardwareSpec | None = None) -> TraceReport:
    data = read_trace(path)
    if gpu is None:
        found = resolve_id(data.device_name) if data.device_name else None
        if not found:
            raise DlperfError(
                f"cannot tell the GPU of {path} (device {data.device_name!r}); pass --gpu"
            )
        gpu = found
    spec = get_gpu(gpu)
    busy = busy_time_us(data.kernels)
    span = 0.0
    if data.kernels:
        span = max(k.start_us + k.duration_us for k in data.kernels) - min(
            k.start_us for k in data.kernels
        )
    by_op: dict[int, list[Kernel]] = defaultdict(list)
    for k in data.kernels:
        if k.op is not None:
            by_op[id(k.op)].append(k)
    ops = {id(k.op): k.op for k in data.kernels if k.op is not None}
    timer = _GemmTimer(spec)
    rows, eligible_not_tc = [], 0
    for key, kernels in by_op.items():
        op = ops[key]
        rows.append(_row(op, kernels, spec, timer))
        if (
            rows[-1].flops
            and _is_contraction(op["name"])
            and not rows[-1].tensor_cores
            and _tensor_core_eligible(spec, rows[-1].dtype)
        ):
            eligible_not_tc += len(kernels)
    rows.sort(key=lambda r: r.time_s * (1 - (r.fraction_of_roofline or 0)), reverse=True)
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
    )


def _is_contraction(name: str) -> bool:
    return any(s in name for s in ("mm", "conv", "linear", "matmul", "attention"))


def _tensor_core_eligible(spec: HardwareSpec, dtype: str) -> bool:
    candidates = {"fp16", "bf16"} | ({"fp32"} if spec.has_dtype("tf32") else set())
    return dtype in candidates and any(u.tensor_cores for u in spec.math.values())


def _row(op: dict, kernels: list[Kernel], spec: HardwareSpec, timer) -> TraceRow:
    time_s = sum(k.duration_us for k in kernels) * 1e-6
    tc = any(k.tensor_cores for k in kernels)
    event = _event(op)
    tensors = [m for m in (event.args if event else ()) if m is not None]
    dtype = DTYPE_NAMES.get(tensors[0].dtype, "fp32") if tensors else ""
    row = TraceRow(
        kernels[0].name[:120],
        op["name"],
        [list(t.shape) for t in tensors],
        dtype,
        time_s,
        len(kernels),
        tc,
    )
    if event is None or not tensors:
        return row
    # fp32 GEMMs on Tensor Cores ran in TF32
    policy = precision("tf32" if tc and dtype == "fp32" else "fp32")
    try:
        cost = cost_of(event, CostContext(policy, spec))
    except (IndexError, TypeError, ValueError, AttributeError, KeyError):
        cost = None
    if cost is None or not (cost.flops or cost.bytes):
        return row
    math_dtype = cost.gemms[0].dtype if cost.gemms else "fp32"
    math_dtype = math_dtype if spec.has_dtype(math_dtype) else "fp32"
    row.flops, row.bytes = cost.flops, cost.bytes
    row.achieved_flops_per_s = cost.flops / time_s if time_s else None
    row.achieved_bytes_per_s = cost.bytes / time_s if time_s else None
    row.predicted_time_s = price_cost(cost, spec, math_dtype, timer)[0]
    attainable = roofline_time_s(
        cost.flops, cost.bytes, spec.peak_flops_per_s(math_dtype), spec.memory_bandwidth_bytes_per_s
    )
    row.fraction_of_roofline = attainable / time_s if time_s else None
    return row
