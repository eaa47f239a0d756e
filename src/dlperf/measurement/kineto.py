"""Read a PyTorch profiler (Kineto) Chrome trace: GPU kernels, the CPU ops
that launched them, and how far each kernel is from its roofline.

Reading a trace is parsing JSON (optionally gzip): nothing runs and nothing
is unpickled. Kernels are linked to their launching op through the runtime
launch's `correlation` id; the op is the innermost `cpu_op` on the launching
thread whose time span holds the launch.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DlperfError

LAUNCHES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
)
# Kernel-name fragments of Tensor Core (MMA) kernels across cuBLAS, cuDNN and CUTLASS.
TENSOR_CORE_NAMES = re.compile(
    r"(884|1688|16816|168|tensorop|hmma|imma|wgmma|xmma|_tc_|gmma|s16816|h16816|"
    r"bf16gemm|cutlass_80|sm80_xmma|sm90_xmma|f16f16|e4m3)",
    re.IGNORECASE,
)


@dataclass
class Kernel:
    name: str
    start_us: float
    duration_us: float
    correlation: int | None
    op: dict | None = None  # the launching cpu_op event

    @property
    def tensor_cores(self) -> bool:
        return bool(TENSOR_CORE_NAMES.search(self.name))


@dataclass
class TraceData:
    path: str
    device_name: str | None
    kernels: list[Kernel]
    cpu_ops: list[dict]
    steps: int
    other: dict = field(default_factory=dict)


def read_trace(path: str | Path) -> TraceData:
    path = Path(path)
    if not path.is_file():
        raise DlperfError(f"trace {path} does not exist")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, EOFError, OSError, UnicodeDecodeError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise DlperfError(f"{path} is not readable JSON ({why}); is it truncated?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise DlperfError(f"{path} is not a PyTorch profiler trace: it has no traceEvents list")
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    props = doc.get("deviceProperties") or []
    device = props[0].get("name") if props and isinstance(props[0], dict) else None

    kernels, launches, ops_by_tid = [], {}, defaultdict(list)
    steps = set()
    for e in events:
        cat, name = e.get("cat"), e.get("name", "")
        args = e.get("args") or {}
        if cat == "kernel":
            kernels.append(
                Kernel(name, float(e.get("ts", 0)), float(e.get("dur", 0)), args.get("correlation"))
            )
        elif cat == "cuda_runtime" and name in LAUNCHES:
            launches[args.get("correlation")] = e
        elif cat == "cpu_op":
            ops_by_tid[e.get("tid")].append(e)
        if name.startswith("ProfilerStep#"):
            steps.add(name)
    for ops in ops_by_tid.values():
        ops.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    starts = {tid: [e["ts"] for e in ops] for tid, ops in ops_by_tid.items()}
    for k in kernels:
        launch = launches.get(k.correlation)
        if launch is not None:
            k.op = _innermost(
                ops_by_tid.get(launch.get("tid"), []),
                starts.get(launch.get("tid"), []),
                launch["ts"],
            )
    cpu_ops = [e for ops in ops_by_tid.values() for e in ops]
    return TraceData(str(path), device, kernels, cpu_ops, max(1, len(steps)))


def _innermost(ops: list[dict], starts: list[float], ts: float) -> dict | None:
    """The latest-starting op (so the innermost) whose span holds `ts`."""
    i = bisect.bisect_right(starts, ts) - 1
    checked = 0
    while i >= 0 and checked < 64:
        e = ops[i]
        if e["ts"] <= ts <= e["ts"] + e.get("dur", 0):
            return e
        i -= 1
        checked += 1
    return None


def busy_time_us(kernels: list[Kernel]) -> float:
    """Time at least one kernel runs: the length of the union of kernel intervals."""
    total, end = 0.0, float("-inf")
    for k in sorted(kernels, key=lambda k: k.start_us):
        stop = k.start_us + k.duration_us
        if k.start_us >= end:
            total += k.duration_us
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total
