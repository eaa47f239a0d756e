"""Read a PyTorch profiler (Kineto) Chrome trace: GPU kernels, the CPU ops
that launched them, and how far each kernel is from its roofline.

Reading a trace is parsing JSON (optionally gzip): nothing runs and nothing
is unpickled. Kernels are linked to their launching op through the runtime
launch's `correlation` id; the op is the innermost `cpu_op` on the launching
thread whose time span holds the launch.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import math
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
# The categories whose times and links the reader uses.
_TIMED = ("kernel", "cuda_runtime", "cpu_op")
# The main kernels of fused attention (not their pre- and post-processing):
# PyTorch's FlashAttention-2 kernels, FlashAttention-3's Hopper kernels and
# cuDNN's SDPA, all on Tensor Cores; and PyTorch's memory-efficient (cutlass)
# kernels, on Tensor Cores from sm70 in fp16 and bf16, from sm80 in fp32 (3xTF32).
_TENSOR_CORE_ATTENTION = (
    r"flash_fwd(?!_splitkv_combine)|flash_bwd_dq_dk_dv|FlashAttn(Fwd|Bwd)Sm\d|"
    r"sdpa_\w*(fprop|bprop)"
)
ATTENTION_KERNEL_NAMES = re.compile(_TENSOR_CORE_ATTENTION + r"|fmha_cutlass[FB]_", re.I)
# Kernels that multiply matrices for a GEMM or a convolution: cuBLAS (nvjet_* from
# 12.8 on Hopper and Blackwell, sm90_xmma_*, ampere_sgemm_*, gemv), CUTLASS,
# cuDNN's implicit-GEMM (xmma, *_scudnn_*, *_h1688cudnn_*) and direct
# convolutions. Not their helpers: layout and Winograd transforms, split-K
# reductions, cuDNN's offset kernels, nor FBGEMM's embedding kernels.
GEMM_KERNEL_NAMES = re.compile(
    r"(?<!fb)gemm|gemv|nvjet|xmma|wgmma|tensorop|cutlass|_[shi]\d*cudnn|conv(?!ert)|"
    r"(dgrad|wgrad)\w*engine",
    re.IGNORECASE,
)
# Kernel-name fragments of Tensor Core (MMA) kernels across cuBLAS, cuDNN and
# CUTLASS: instruction shapes (884, 1688, 16816), tensorop/xmma/wgmma (Hopper's
# warp-group MMA), tcgen05 (Blackwell's), cuBLAS's nvjet GEMMs and CUTLASS 3's
# sm90/sm100 kernels; and fused attention's, above.
TENSOR_CORE_NAMES = re.compile(
    r"(884|1688|16816|168|tensorop|hmma|imma|wgmma|xmma|_tc_|gmma|s16816|h16816|"
    r"bf16gemm|f16f16|e4m3|nvjet|cutlass3x_sm|tcgen05|"
    r"fmha_cutlass[FB]_(b?f16\w*_sm([7-9]\d|1\d\d)|f32\w*_sm([89]\d|1\d\d))|"
    + _TENSOR_CORE_ATTENTION
    + ")",
    re.IGNORECASE,
)
# ... unless the name says otherwise: CUTLASS's SIMT kernels (cutlass_80_simt_sgemm)
# and cuBLAS's matrix-vector kernels.
NOT_TENSOR_CORE_NAMES = re.compile(r"simt|gemv", re.IGNORECASE)


@dataclass
class Kernel:
    name: str
    start_us: float
    duration_us: float
    correlation: int | None
    op: dict | None = None  # the launching cpu_op event
    launch_us: float | None = None  # when the host launched it (the runtime call's start)
    stream: int | None = None

    @property
    def tensor_cores(self) -> bool:
        return tensor_core_kernel(self.name)


@functools.lru_cache(maxsize=4096)
def tensor_core_kernel(name: str) -> bool:
    """Whether the kernel `name` ran on Tensor Cores (by its name)."""
    # thousands of launches share a few hundred long names; the search is the slow part
    return bool(TENSOR_CORE_NAMES.search(name)) and not NOT_TENSOR_CORE_NAMES.search(name)


def matrix_kernel(name: str) -> str | None:
    """What the kernel `name` multiplies matrices for, by its name: "attention"
    (a fused attention kernel), "gemm" (a GEMM or a convolution), else None."""
    if ATTENTION_KERNEL_NAMES.search(name):
        return "attention"
    if GEMM_KERNEL_NAMES.search(name):
        return "gemm"
    return None


@dataclass
class TraceData:
    path: str
    device_name: str | None
    kernels: list[Kernel]
    cpu_ops: list[dict]
    steps: int
    other: dict = field(default_factory=dict)
    # (start, duration) in us of each `ProfilerStep#N` span, in order
    step_spans: list[tuple[float, float]] = field(default_factory=list)
    rank: int | None = None  # distributedInfo.rank of a multi-GPU run
    # cpu_ops per thread, each by start (the longest first at a tie): parents before children
    threads: list[list[dict]] = field(default_factory=list)


def read_trace(path: str | Path) -> TraceData:
    path = Path(path)
    if path.is_dir():
        raise DlperfError(
            f"trace {path} is a folder: give one profiler trace file (.json or .json.gz) "
            "in it (dlperf compare also reads a folder of one trace per rank)"
        )
    if not path.is_file():
        raise DlperfError(
            f"trace {path} does not exist: give the path of a PyTorch profiler trace "
            "(.json or .json.gz, as torch.profiler's export_chrome_trace writes it)"
        )
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, EOFError, OSError, UnicodeDecodeError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise DlperfError(f"{path} is not readable JSON ({why}); is it truncated?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise DlperfError(f"{path} is not a PyTorch profiler trace: it has no traceEvents list")
    props = doc.get("deviceProperties")
    first = props[0] if isinstance(props, list) and props else None
    device = first.get("name") if isinstance(first, dict) else None
    device = device if isinstance(device, str) else None

    kernels, launches, ops_by_tid = [], {}, defaultdict(list)
    steps = {}
    for index, raw in enumerate(doc["traceEvents"]):
        if not isinstance(raw, dict):
            continue
        cat, name = raw.get("cat"), raw.get("name", "")
        if cat not in _TIMED and not (isinstance(name, str) and name.startswith("ProfilerStep#")):
            continue  # flows, memcpys, metadata: read nothing else from them
        e = _checked(raw, index, path)
        args = e["args"]
        if cat == "kernel":
            stream = args.get("stream")
            stream = stream if isinstance(stream, int) and not isinstance(stream, bool) else None
            kernels.append(
                Kernel(e["name"], e["ts"], e["dur"], args.get("correlation"), stream=stream)
            )
        elif cat == "cuda_runtime" and e["name"] in LAUNCHES:
            launches[args.get("correlation")] = e
        elif cat == "cpu_op":
            ops_by_tid[e["tid"]].append(e)
        if e["name"].startswith("ProfilerStep#") and cat != "gpu_user_annotation":
            steps.setdefault(e["name"], (e["ts"], e["dur"]))
    for ops in ops_by_tid.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
    starts = {tid: [e["ts"] for e in ops] for tid, ops in ops_by_tid.items()}
    for k in kernels:
        launch = launches.get(k.correlation)
        if launch is not None:
            k.launch_us = launch["ts"]
            k.op = _innermost(
                ops_by_tid.get(launch["tid"], []), starts.get(launch["tid"], []), launch["ts"]
            )
    cpu_ops = [e for ops in ops_by_tid.values() for e in ops]
    info = doc.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
    spans = sorted(steps.values())
    return TraceData(
        str(path), device, kernels, cpu_ops, max(1, len(steps)), step_spans=spans, rank=rank,
        threads=list(ops_by_tid.values()),
    )  # fmt: skip


def _checked(e: dict, index: int, path: Path) -> dict:
    """A copy of a timed event with its fields checked: the reader sorts and
    compares them, so a string `ts` must be one clear line, not a traceback."""

    def bad(key: str, why: str, value=None) -> DlperfError:
        value = e.get(key) if value is None else value
        return DlperfError(
            f"{path}: traceEvents[{index}] (cat {e.get('cat')!r}) has {key} "
            f"{value!r:.60}; {why}. Is the file edited or written by another tool?"
        )

    name = e.get("name", "")
    if not isinstance(name, str):
        raise bad("name", "it must be a string")
    out = {**e, "name": name, "args": e.get("args") or {}}
    if not isinstance(out["args"], dict):
        raise bad("args", "it must be an object")
    for key in ("ts", "dur"):
        if key not in e:  # a timed event without its time would count as 0 us, silently
            raise bad(key, "it is missing", "(none)")
        value = e.get(key, 0)
        # bool is an int subclass, and a count of microseconds is never a truth value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(key, "it must be a number of microseconds")
        if not math.isfinite(value):
            raise bad(key, "it must be a finite number of microseconds")
        if key == "dur" and value < 0:
            raise bad(key, "a duration cannot be negative")
        out[key] = float(value)
    if not isinstance(e.get("tid"), (int, str, type(None))):
        raise bad("tid", "it must be a number or a string")
    correlation = out["args"].get("correlation")
    if not isinstance(correlation, (int, type(None))) or isinstance(correlation, bool):
        raise bad("args.correlation", "it must be an integer id", correlation)
    return out


def _innermost(ops: list[dict], starts: list[float], ts: float) -> dict | None:
    """The latest-starting op (so the innermost) whose span holds `ts`."""
    i = bisect.bisect_right(starts, ts) - 1
    checked = 0
    while i >= 0 and checked < 64:
        e = ops[i]
        if e["ts"] <= ts <= e["ts"] + e["dur"]:
            return e
        i -= 1
        checked += 1
    return None


def kernel_spans(kernels: list[Kernel]) -> list[tuple[float, float]]:
    """The union of the kernels' (start, end) intervals in us: merged, in order."""
    merged: list[list[float]] = []
    for start, end in sorted((k.start_us, k.start_us + k.duration_us) for k in kernels):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def busy_time_us(kernels: list[Kernel]) -> float:
    """Time at least one kernel runs: the length of the union of kernel intervals."""
    return sum(end - start for start, end in kernel_spans(kernels))
