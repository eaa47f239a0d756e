"""Fixed costs of kernels: alone, back to back in a stream, replayed in a CUDA graph.

A kernel timed alone (a benchmark that syncs around it, `dlperf gemm`) pays
`kernel_latency_s`: its launch reaches an idle GPU, blocks are scheduled, the
first loads travel from DRAM, the last wave drains. Issued back to back on
one stream while the previous kernel still runs, the launch is processed in
the shadow of that kernel: what the next kernel adds is the gap between the
two plus its own short ramp (`stream_kernel_s`). A CUDA graph hands the GPU
the whole list at once and shortens the gap further (`graph_kernel_s`).

The stream and graph figures are measured on the profiler traces in
../shared/data/traces (`bench/fixed_costs.py`: the shortest kernels'
duration plus the gap between busy back-to-back kernels, median and 5th
percentile); 0 in a family's table means "no measurement": the alone figure.
"""

from __future__ import annotations

from ..hardware import HardwareSpec


def back_to_back_s(spec: HardwareSpec, cuda_graphs: bool = False) -> float:
    """What one kernel adds back to back on a busy stream (or in a CUDA graph):
    never more than it costs alone."""
    eff = spec.efficiency
    figure = eff.graph_kernel_s if cuda_graphs else eff.stream_kernel_s
    return min(eff.kernel_latency_s, figure) if figure > 0 else eff.kernel_latency_s


def overlap_saving_s(spec: HardwareSpec, cuda_graphs: bool = False) -> float:
    """Seconds a kernel's priced time (its alone latency included) shrinks by
    when it starts while the previous kernel of the stream still runs."""
    return spec.efficiency.kernel_latency_s - back_to_back_s(spec, cuda_graphs)
