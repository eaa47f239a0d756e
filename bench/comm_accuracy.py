"""Measured all-reduces of the development set against dlperf's collective model.

Every all-reduce row of `../shared/data/deepbench/allreduce.csv` and
`../shared/data/llmcompass/allreduce.csv`, predicted by the one NCCL model
(`dlperf.parallel.collectives.collective_time_s`) and, beside it, by the plain
ring model (2(n-1)/n of the bytes at the link's bandwidth plus one 5 us step
latency per ring step); median and p90 absolute error per group.

The links, as the sources describe them:
- LLMCompass: 4 A100-SXM4-80GB, NVLink 3 fully connected (one node); sizes
  are bytes of fp16 buffers; times as NCCL runs them (12.5 us floor).
- DeepBench (README, "Topology for NVIDIA 8 GPU System"): 8 GPUs per node on
  PCIe gen3 x16 through PLX switches (the GPU's spec: 16 GB/s), nodes joined
  by InfiniBand FDR (56 Gb/s = 7e9 bytes/s per node, one NIC); fp32 buffers;
  the fastest of NCCL 2.0, OSU MPI and Baidu's ring per row (note column).

Run: python bench/comm_accuracy.py [--markdown] [--rows]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

import dlperf
from dlperf.parallel.collectives import collective_time_s
from dlperf.parallel.network import RING_STEP_LATENCY_S, interconnect_for, ring_time_s

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
FILES = [DATA / "llmcompass" / "allreduce.csv", DATA / "deepbench" / "allreduce.csv"]
FDR_NODE_BYTES_PER_S = 56e9 / 8  # one InfiniBand FDR NIC per node (DeepBench README)


def _rows():
    for path in FILES:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            extra = dict(kv.split("=", 1) for kv in row["extra"].split(";"))
            yield row, int(extra["gpus"]), int(extra["nodes"]), float(extra["bytes"])


def predict(row, gpus: int, nodes: int, nbytes: float) -> tuple[float, float]:
    """(NCCL model, plain ring model) seconds for one measured row."""
    spec = dlperf.gpu(row["gpu"])
    per_node = gpus // nodes
    network = FDR_NODE_BYTES_PER_S if row["source"] == "deepbench" else None
    net = interconnect_for(spec, per_node if nodes == 1 else 8, network)
    nccl = collective_time_s("all_reduce", nbytes, gpus, net)
    bus = net.ring_bytes_per_s(gpus)
    plain = ring_time_s("all_reduce", nbytes, gpus, bus, RING_STEP_LATENCY_S)
    return nccl, plain


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args()
    groups: dict[str, list[tuple[float, float]]] = {}
    for row, gpus, nodes, nbytes in _rows():
        measured = float(row["time_s"])
        nccl, plain = predict(row, gpus, nodes, nbytes)
        key = f"{row['source']} {row['gpu']}"
        groups.setdefault(key, []).append((nccl / measured - 1, plain / measured - 1))
        if args.rows:
            print(
                f"{key:32s} {gpus:3d} GPUs {nodes} nodes {nbytes:14.0f} B "
                f"measured {measured * 1e6:10.1f} us  nccl {nccl / measured - 1:+.2f}  "
                f"ring {plain / measured - 1:+.2f}"
            )
    head = ["group", "rows", "NCCL median", "NCCL p90", "ring median", "ring p90"]
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    else:
        print("  ".join(f"{h:>12s}" for h in head))
    for key, errors in groups.items():
        nccl = [abs(e[0]) for e in errors]
        ring = [abs(e[1]) for e in errors]
        cells = [
            key,
            str(len(errors)),
            f"{statistics.median(nccl):.0%}",
            f"{_p90(nccl):.0%}",
            f"{statistics.median(ring):.0%}",
            f"{_p90(ring):.0%}",
        ]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
