"""The gap between kernels back to back on a stream, measured on the profiler traces.

For the busiest stream of each trace in ../shared/data/traces: the idle gap
between consecutive kernels where the GPU ran them back to back (gaps under 5
us; longer ones are the host falling behind): `stream_gap_s` is their median,
`graph_gap_s` their 5th percentile (the front end's own floor, what a CUDA
graph's pre-built list approaches); and, for reference, the device time of
the shortest kernels (the median of the shortest 5%). Kineto stores
microseconds; the A100 traces round them to whole microseconds (+-0.5 us).

Run: python bench/fixed_costs.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from sources import DATA  # noqa: E402

TRACES = {
    "a100_transformer_train_shapes.json.gz": "ampere",
    "a100_alexnet.json.gz": "ampere",
    "v100_cnn_train.json.gz": "volta",
}
BUSY_GAP_US = 5.0


def stream_figures(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    streams: dict = {}
    for e in events:
        if e.get("cat") == "kernel":
            streams.setdefault((e["pid"], e["tid"]), []).append(e)
    kernels = sorted(max(streams.values(), key=len), key=lambda e: e["ts"])
    start = np.array([e["ts"] for e in kernels], dtype=float)
    duration = np.array([e["dur"] for e in kernels], dtype=float)
    gaps = start[1:] - (start[:-1] + duration[:-1])
    busy = gaps[(gaps >= 0) & (gaps < BUSY_GAP_US)]
    floor = float(np.median(np.sort(duration)[: max(3, len(duration) // 20)]))
    return {
        "kernels": len(kernels),
        "floor_us": floor,
        "gap_median_us": float(np.median(busy)),
        "gap_p5_us": float(np.percentile(busy, 5)),
    }


def main() -> int:
    print(
        "| trace | family | kernels | shortest kernels us | gap median us (stream_gap_s) "
        "| gap p5 us (graph_gap_s) |"
    )
    print("|---|---|---|---|---|---|")
    for name, family in TRACES.items():
        f = stream_figures(DATA / "traces" / name)
        cells = [name, family, str(f["kernels"])] + [
            f"{f[key]:.2f}" for key in ("floor_us", "gap_median_us", "gap_p5_us")
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
