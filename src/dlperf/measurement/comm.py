"""`dlperf measure-comm`: real collectives through torch.distributed.

Launches `--nproc` workers with torch.distributed's own launcher on this
machine (loopback only), times each collective over a sweep of sizes, and
reports the median time and the bus bandwidth (the ring model's traffic per
GPU over the time: all-reduce 2(n-1)/n of the bytes, all-gather and
reduce-scatter (n-1)/n), as nccl-tests defines it. The fit of time =
latency + bytes / bandwidth over the sweep can be saved as an interconnect
file for `dlperf plan`.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from ..errors import DlperfError
from ..jsonable import Jsonable

DEFAULT_SIZES = (2**12, 2**16, 2**20, 2**22)


@dataclass
class CollectiveResult(Jsonable):
    op: str
    bytes: int
    time_s: float
    bus_bandwidth_bytes_per_s: float


def bus_factor(op: str, world: int) -> float:
    share = (world - 1) / world
    return 2 * share if op == "all_reduce" else share


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_comm(
    nproc: int = 2,
    backend: str = "gloo",
    sizes=DEFAULT_SIZES,
    repeats: int = 5,
    timeout_s: float = 300,
) -> dict:
    _check_ranks(nproc, backend)
    raw = _run_workers(nproc, backend, sizes, repeats, timeout_s)
    world = raw["world"]
    rows = []
    for r in raw["results"]:
        t = statistics.median(r["samples_s"])
        rows.append(
            CollectiveResult(r["op"], r["bytes"], t, r["bytes"] * bus_factor(r["op"], world) / t)
        )
    return {
        "backend": raw["backend"],
        "world": world,
        "collectives": [r.to_dict() for r in rows],
        "skipped": raw["skipped"],
        "interconnect": fit_interconnect(rows, world),
    }


def _check_ranks(nproc: int, backend: str) -> None:
    """Refuse, in one line, a run the workers could not start."""
    if nproc < 2:
        raise DlperfError("--nproc must be at least 2: a collective needs two ranks")
    if backend not in ("gloo", "nccl"):
        raise DlperfError(f"unknown backend {backend!r}; choose gloo or nccl")
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < nproc:
            raise DlperfError(f"nccl needs {nproc} CUDA devices; use --backend gloo on a CPU")


def _run_workers(nproc: int, backend: str, sizes, repeats: int, timeout_s: float) -> dict:
    """The workers' timings (`comm_worker`'s JSON), from `nproc` local ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "comm.json")
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            "--nnodes=1",
            "--master-addr=127.0.0.1",
            f"--master-port={_free_port()}",
            "-m",
            "dlperf.measurement.comm_worker",
            "--backend",
            backend,
            "--sizes",
            ",".join(str(int(s)) for s in sizes),
            "--repeats",
            str(repeats),
            "--out",
            out,
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=_loopback())
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise DlperfError(f"the {nproc} workers did not finish in {timeout_s:.0f} s") from None
        if proc.returncode or not os.path.exists(out):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise DlperfError(f"the collective workers failed: {last}")
        with open(out) as f:
            return json.load(f)


def _loopback() -> str:
    return "lo"


def fit_interconnect(rows: list[CollectiveResult], world: int) -> dict:
    """Least-squares fit of time = latency + traffic / bandwidth over the all-reduce sweep."""
    points = [(r.bytes * bus_factor(r.op, world), r.time_s) for r in rows if r.op == "all_reduce"]
    if len(points) < 2:
        return {}
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0
    if slope <= 0:  # noisy sweep: fall back to the best bandwidth seen, no latency term
        best = max(r.bus_bandwidth_bytes_per_s for r in rows if r.op == "all_reduce")
        return {"bandwidth_bytes_per_s": best, "latency_s": 0.0}
    latency = max(0.0, my - slope * mx)
    return {"bandwidth_bytes_per_s": 1 / slope, "latency_s": latency / max(1, 2 * (world - 1))}
