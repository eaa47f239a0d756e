"""The collectives of serving: the one NCCL model of `parallel.collectives`.

Tensor-parallel inference all-reduces small activations (b x tokens x hidden
x 2 B: kilobytes in decode), where latency, not bandwidth, sets the time;
`parallel.collectives` prices them as NCCL does (ring and tree; LL, LL128
and Simple; channels; the kernel launch), the same function `dlperf plan`
prices its collectives with. Here only the links are built from the GPU's
spec (`parallel.network.interconnect_for`).
"""

from __future__ import annotations

from ..hardware import HardwareSpec
from ..parallel import collectives
from ..parallel.network import interconnect_for


def collective_time_s(
    kind: str,
    nbytes: float,
    ranks: int,
    spec: HardwareSpec,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
) -> float:
    """Seconds of an all-reduce or all-gather of `nbytes` (the whole buffer)
    over `ranks` consecutive GPUs, `gpus_per_node` to a node."""
    net = interconnect_for(spec, gpus_per_node, node_network_bytes_per_s)
    return collectives.collective_time_s(kind, nbytes, ranks, net)


def send_time_s(
    nbytes: float,
    spec: HardwareSpec,
    across_nodes: bool,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
) -> float:
    """A point-to-point send of `nbytes` (pipeline stages) over the GPU's link
    or, `across_nodes`, over the network."""
    net = interconnect_for(spec, gpus_per_node, node_network_bytes_per_s)
    return collectives.send_time_s(nbytes, net, across_nodes)
