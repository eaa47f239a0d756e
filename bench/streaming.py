"""The rate of memory-bound kernels on data far larger than L2, per GPU.

NeuSight timed element-wise ops (add, mul, relu, gelu ..., fp32) up to several
GB. On tensors at least 10x the L2 nothing is left in cache from the producer,
the small-tensor plateau is long passed and the eager harness floor (about 20
us) is under 3% of a call: bytes / time over the datasheet bandwidth is the
fraction of bandwidth a cold stream reaches (`cold_dram_efficiency`). Bytes:
inputs and output at 4 B (2 tensors for unary ops, 3 for binary ones; a
scalar operand is not a tensor).

Run: python bench/streaming.py
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from dlperf.hardware import gpu  # noqa: E402
from sources import DATA  # noqa: E402

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


def main() -> int:
    print("| GPU | rows (>= 10x L2) | median achieved / datasheet | p10-p90 spread |")
    print("|---|---|---|---|")
    for gpu_id, (rows, median, spread) in cold_fractions().items():
        print(f"| {gpu_id} | {rows} | {median:.3f} | {spread:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
