"""Measured GEMM times from ../shared/data, as numpy arrays grouped for the benches.

Each source times differently (see ../shared/data/README.md), so each group
says what its numbers include:

- `kernel`: device time of the kernels alone (DeepBench averages of
  back-to-back calls; kernel durations in a profiler trace).
- `eager`: one eager framework call timed from the host side or with events
  around it (NeuSight, LLMCompass): kernel time plus a per-call floor of the
  harness on that host, which the benches estimate and report separately.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("DLPERF_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

GEMM_FILES = {
    "deepbench": ["deepbench/gemm.csv"],
    "neusight": ["neusight_train/linear.csv", "neusight_train/bmm.csv"],
    "llmcompass": ["llmcompass/gemm.csv", "llmcompass/bmm.csv"],
    "xla": ["xla_h100/gemm.csv"],
}
TIMING = {
    "deepbench": "kernel",
    "neusight": "eager",
    "llmcompass": "eager",
    "trace": "kernel",
    "xla": "kernel",  # XLA's tool: median kernel time, no host launch
}
TRACE_FILE = "traces/a100_transformer_train_shapes.json.gz"
TRACE_GPU = "a100-sxm4-40gb"  # "NVIDIA A100-PG509-200" in deviceProperties


@dataclass
class Group:
    source: str
    gpu: str
    dtype: str  # storage dtype
    math_dtype: str  # math path
    op: str
    b: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    time_s: np.ndarray

    @property
    def timing(self) -> str:
        return TIMING[self.source]

    @property
    def key(self) -> str:
        math = f"({self.math_dtype} math)" if self.math_dtype != self.dtype else ""
        return f"{self.source} {self.gpu} {self.dtype}{math} {self.op}"

    def __len__(self) -> int:
        return len(self.time_s)


def _extra(text: str) -> dict:
    return dict(item.split("=", 1) for item in text.split(";") if "=" in item)


def _math_dtype(row: dict, extra: dict) -> str:
    if extra.get("math") == "fp32_pseudo_fp16":
        return "fp32"
    return row["dtype"]


def load_csv_groups(source: str) -> list[Group]:
    rows = defaultdict(list)
    for name in GEMM_FILES[source]:
        with open(DATA / name) as f:
            for row in csv.DictReader(f):
                extra = _extra(row["extra"])
                b, m, n, k = (int(row[c]) for c in "bmnk")
                if "timed_mnk" in extra:  # DeepBench padded the problem it timed
                    m, n, k = (int(x) for x in extra["timed_mnk"].split("x"))
                # XLA's f32 dots ran as TF32: fp32 storage, TF32 math
                storage = "fp32" if row["dtype"] == "tf32" else row["dtype"]
                key = (row["gpu"], storage, _math_dtype(row, extra), row["op"])
                rows[key].append((b, m, n, k, float(row["time_s"])))
    groups = []
    for (gpu, dtype, math_dtype, op), items in sorted(rows.items()):
        arr = np.array(items, dtype=float)
        groups.append(
            Group(
                source,
                gpu,
                dtype,
                math_dtype,
                op,
                *(arr[:, i].astype(np.int64) for i in range(4)),
                time_s=arr[:, 4],
            )
        )
    return groups


def _gemm_dims(name: str, dims: list) -> tuple[int, int, int, int] | None:
    """(b, m, n, k) of an aten matmul op from its recorded input shapes."""
    try:
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 1, m, n, k
        if name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 1, m, n, k
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return b, m, n, k
    except (ValueError, IndexError, TypeError):
        return None
    return None


LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def trace_op_kernels(names: tuple[str, ...]):
    """(cpu_op event, its kernels' seconds) for the ops of the real A100 trace
    named in `names`. An op's kernels are those launched (cuda_runtime events on
    the op's thread, inside its time span) and found through the launch's
    correlation id."""
    with gzip.open(DATA / TRACE_FILE, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = {
        e["args"]["correlation"]: e["dur"] * 1e-6 for e in events if e.get("cat") == "kernel"
    }
    launches = defaultdict(list)  # tid -> [(ts, correlation)]
    for e in events:
        if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCHES:
            launches[e["tid"]].append((e["ts"], e["args"]["correlation"]))
    for e in events:
        if e.get("cat") != "cpu_op" or e["name"] not in names:
            continue
        start, end = e["ts"], e["ts"] + e["dur"]
        found = [c for ts, c in launches.get(e["tid"], []) if start <= ts <= end]
        yield e, [kernels[c] for c in found if c in kernels]


def load_trace_groups() -> list[Group]:
    """GEMM kernels of the real A100 trace, linked to their aten op's shapes."""
    rows = []
    for e, times in trace_op_kernels(("aten::mm", "aten::addmm", "aten::bmm")):
        dims = _gemm_dims(e["name"], e["args"].get("Input Dims", []))
        if dims is None or min(dims) <= 0 or not times:
            continue
        rows.append((*dims, sum(times)))
    arr = np.array(rows, dtype=float)
    cols = [arr[:, i].astype(np.int64) for i in range(4)]
    return [Group("trace", TRACE_GPU, "fp32", "tf32", "mm", *cols, time_s=arr[:, 4])]


def load_gemm_groups() -> list[Group]:
    groups = []
    for source in GEMM_FILES:
        groups += load_csv_groups(source)
    groups += load_trace_groups()
    return groups
