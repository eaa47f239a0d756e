"""Fixed costs of kernels: alone, and back to back in a stream or a CUDA graph.

A kernel's price is its device time, as a profiler measures it from its first
to its last instruction: a fixed part (blocks scheduled, the first loads
travelling from DRAM, the last wave draining: `kernel_latency_s` for GEMMs,
`streaming_latency_s` for memory-bound kernels, both fitted on kernel-timed
measurements) plus its work. Two kernels on one stream do not touch: the GPU
front end starts the next one a gap after the previous ends, even when the
host issued it long before (`stream_gap_s`); a CUDA graph hands the GPU the
whole list at once and the gap narrows (`graph_gap_s`). A kernel the GPU had
to wait for starts when the host issues it: no gap beyond that wait.

The gaps are measured on the profiler traces in ../shared/data/traces
(`bench/fixed_costs.py`: the idle time between busy back-to-back kernels,
median for a stream and 5th percentile for a graph). A family whose fixed
costs were fitted on back-to-back averages (DeepBench's) has the gap in them
already: 0.
"""

from __future__ import annotations

from ..hardware import HardwareSpec


def gap_s(spec: HardwareSpec, cuda_graphs: bool = False) -> float:
    """The idle time between two kernels run back to back on one stream (or in
    a CUDA graph) beyond their own device times."""
    eff = spec.efficiency
    return eff.graph_gap_s if cuda_graphs else eff.stream_gap_s


def streaming_latency_s(spec: HardwareSpec) -> float:
    """Fixed device time of a memory-bound kernel: its own fit where the family
    has kernel-timed measurements of such kernels, else the GEMMs' launch latency."""
    eff = spec.efficiency
    return eff.streaming_latency_s or eff.kernel_latency_s
