"""Memory-bound kernels as devices run them: their fixed cost and small-tensor
plateau on the A100 trace's kernel times, and their rate on data far larger
than L2 per GPU.

1. The A100 profiler trace (../shared/data/traces) holds 3,018 element-wise
   kernels (add, add_, mul, sigmoid on fp32 tensors of 1 kB to 400 MB) linked to
   their aten op's shapes: device times, no harness. `streaming_latency_s` and
   `saturation_bytes_per_sm` are fitted on them (median absolute error); the
   rest of the Ampere constants are as bundled.
2. The cold rate: NeuSight timed element-wise ops (add, mul, relu, gelu ...,
fp32) up to several GB. On tensors at least 10x the L2 nothing is left in cache from the producer,
the small-tensor plateau is long passed and the eager harness floor (about 20
us) is under 3% of a call: bytes / time over the datasheet bandwidth is the
fraction of bandwidth a cold stream reaches (`cold_dram_efficiency`). Bytes:
inputs and output at 4 B (2 tensors for unary ops, 3 for binary ones; a
scalar operand is not a tensor).

Run: python bench/streaming.py
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).parent))

from dlperf.hardware import gpu  # noqa: E402
from dlperf.kernels.roofline import streaming_time_s  # noqa: E402
from sources import DATA, TRACE_GPU, trace_op_kernels  # noqa: E402

ELEMENTWISE_OPS = ("aten::add_", "aten::add", "aten::mul", "aten::sigmoid")
BINARY = {"add", "mul", "div", "pow"}
LARGE_OVER_L2 = 10.0


def cold_fractions() -> dict[str, tuple[int, float, float]]:
    """gpu -> (rows, median, 10th-90th percentile spread) of achieved / datasheet."""
    found = defaultdict(list)
    with open(DATA / "neusight_train" / "elementwise.csv") as f:
        for row in csv.DictReader(f):
            spec = gpu(row["gpu"])
            tensors = 3 if row["op"] in BINARY and "operand=tensor" in row["extra"] else 2
            moved = int(row["m"]) * int(row["n"]) * 4 * tensors
            if moved < LARGE_OVER_L2 * spec.l2_cache_bytes:
                continue
            rate = moved / float(row["time_s"]) / spec.memory_bandwidth_bytes_per_s
            found[spec.id].append(rate)
    out = {}
    for gpu_id, rates in sorted(found.items()):
        r = np.array(rates)
        out[gpu_id] = (
            len(r),
            float(np.median(r)),
            float(np.percentile(r, 90) - np.percentile(r, 10)),
        )
    return out


def trace_elementwise() -> tuple[np.ndarray, np.ndarray]:
    """(bytes moved, kernel seconds) of the A100 trace's one-kernel element-wise ops."""
    rows = []
    for e, found in trace_op_kernels(ELEMENTWISE_OPS):
        dims = e["args"].get("Input Dims", [])
        if not dims or not dims[0]:
            continue
        elements = int(np.prod(dims[0]))
        two_tensors = len(dims) > 1 and dims[1] and int(np.prod(dims[1])) == elements
        tensors = 3 if e["name"] != "aten::sigmoid" and two_tensors else 2
        if len(found) == 1:
            rows.append((elements * 4 * tensors, found[0]))
    table = np.array(rows)
    return table[:, 0], table[:, 1]


def fit_fixed_cost(moved: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """(streaming_latency_s, saturation_bytes_per_sm, median error) on the trace rows."""
    base = gpu(TRACE_GPU)

    def predicted(x):
        latency, saturation = np.exp(x)
        eff = dataclasses.replace(
            base.efficiency, streaming_latency_s=latency, saturation_bytes_per_sm=saturation
        )
        return streaming_time_s(moved, dataclasses.replace(base, efficiency=eff))

    def error(x):
        return float(np.median(np.abs(predicted(x) - measured) / measured))

    starts = [np.log([lat, sat]) for lat in (1e-6, 2e-6, 3e-6) for sat in (4e3, 16e3, 64e3)]
    best = min((minimize(error, x0, method="Nelder-Mead") for x0 in starts), key=lambda r: r.fun)
    latency, saturation = np.exp(best.x)
    return float(latency), float(saturation), float(best.fun)


def main() -> int:
    moved, measured = trace_elementwise()
    latency, saturation, error = fit_fixed_cost(moved, measured)
    print(
        f"A100 trace, {len(moved)} element-wise kernels: streaming_latency_s = {latency:.3g}, "
        f"saturation_bytes_per_sm = {saturation:.4g}, median error {error:.1%}"
    )
    bundled = streaming_time_s(moved, gpu(TRACE_GPU))
    print("\n| bytes moved | kernels | measured us (median) | bundled constants us |")
    print("|---|---|---|---|")
    for low, high in ((0, 1e5), (1e5, 1e6), (1e6, 1e7), (1e7, 1e8), (1e8, 1e10)):
        pick = (moved >= low) & (moved < high)
        if pick.any():
            print(
                f"| {low:.0e}-{high:.0e} | {pick.sum()} | {np.median(measured[pick]) * 1e6:.1f} "
                f"| {np.median(bundled[pick]) * 1e6:.1f} |"
            )
    print()
    print("| GPU | rows (>= 10x L2) | median achieved / datasheet | p10-p90 spread |")
    print("|---|---|---|---|")
    for gpu_id, (rows, median, spread) in cold_fractions().items():
        print(f"| {gpu_id} | {rows} | {median:.3f} | {spread:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
