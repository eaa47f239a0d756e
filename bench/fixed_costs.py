"""What a kernel adds back to back in a stream, measured on the profiler traces.

For the busiest stream of each trace in ../shared/data/traces: the duration of
its shortest kernels (the median of the shortest 5%: launch ramp and drain of
a kernel that does almost nothing) and the idle gap between consecutive
kernels where the GPU ran them back to back (gaps under 5 us; longer ones are
the host falling behind). `stream_kernel_s` = floor + median gap;
`graph_kernel_s` = floor + 5th-percentile gap (the front end's own floor, what a
CUDA graph's pre-built list approaches). Kineto stores microseconds; the A100
traces round them to whole microseconds, so their figures are +-0.5 us.

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
        "stream_kernel_us": floor + float(np.median(busy)),
        "graph_kernel_us": floor + float(np.percentile(busy, 5)),
    }


def main() -> int:
    print(
        "| trace | family | kernels | shortest kernels us | gap median us | gap p5 us "
        "| stream_kernel us | graph_kernel us |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, family in TRACES.items():
        f = stream_figures(DATA / "traces" / name)
        cells = [name, family, str(f["kernels"])] + [
            f"{f[key]:.2f}"
            for key in (
                "floor_us",
                "gap_median_us",
                "gap_p5_us",
                "stream_kernel_us",
                "graph_kernel_us",
            )
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
