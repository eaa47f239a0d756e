"""The links between GPUs and the ring model of collectives.

All-reduce moves 2(n-1)/n of the buffer through every GPU's link,
all-gather and reduce-scatter (n-1)/n, plus one latency per ring step; an
all-to-all sends (n-1)/n of each GPU's buffer to its peers; a pipeline send
is one hop. The defaults where nothing is known are data:
`hardware/specs/_interconnect.toml` (the node's network per GPU generation)
and `_nccl.toml` (the bus bandwidth NCCL's own model allows a ring on
NVLink).

Which link a group of GPUs uses follows from where its ranks sit: ranks are
numbered tensor-parallel innermost, then context, data and pipeline
parallel (Megatron-LM's order), so a group whose members are `stride` ranks
apart spans `size x stride` consecutive ranks. Within a node a ring runs on
NVLink (else PCIe). Across nodes NCCL runs one ring per NIC: a group with k
members in each node has k of the node's NICs to itself, so its bus
bandwidth is k/gpus_per_node of the node's network, at most the GPU's link
(one member per node, as a data-parallel group beside tensor parallelism of
8: one NIC each).

A spec may declare an NVLink domain larger than a node (`nvlink_domain_gpus`:
GB200 NVL72 joins 72 GPUs, 4 to a compute tray, by one NVLink switch
fabric). Then the "node" of the ring model is the domain: a group within
it runs on NVLink, and the domain's network is its GPUs' NICs together.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..hardware.spec import SPECS_DIR, tomllib

INTERCONNECT_FILE = SPECS_DIR / "_interconnect.toml"
NCCL_FILE = SPECS_DIR / "_nccl.toml"
with open(INTERCONNECT_FILE, "rb") as _f:
    _DEFAULTS = tomllib.load(_f)
RING_STEP_LATENCY_S: float = _DEFAULTS["ring_step_latency_s"]
DEFAULT_NODE_NETWORK_BYTES_PER_S: float = _DEFAULTS["node_network_bytes_per_s"]
FALLBACK_LINK_BYTES_PER_S: float = _DEFAULTS["fallback_link_bytes_per_s"]
NODE_NETWORK_BY_ARCHITECTURE: dict[str, float] = _DEFAULTS.get(
    "node_network_bytes_per_s_by_architecture", {}
)


@functools.cache
def nccl_constants() -> dict:
    """NCCL's own cost-model constants (`_nccl.toml`), read once."""
    with open(NCCL_FILE, "rb") as f:
        return tomllib.load(f)


@dataclass(frozen=True)
class Interconnect:
    intra_node_bytes_per_s: float  # per GPU, one direction
    inter_node_bytes_per_s: float  # per GPU (its share of the node's network), one direction
    latency_s: float = RING_STEP_LATENCY_S
    gpus_per_node: int = 8
    # The node's whole network (all its NICs); 0: the GPUs' shares times their number.
    node_network_bytes_per_s: float = 0.0
    # The most bus bandwidth NCCL's model gives a ring within a node (None: the link's).
    ring_bus_cap_bytes_per_s: float | None = None
    # "nvlink" or "pcie": the link NCCL's cost model prices (parallel/collectives.py);
    # None (links built by hand or measured): the plain ring model with `latency_s`.
    intra_link: str | None = None
    architecture: str = ""  # the GPU family: NCCL's channels and protocol caps
    kernel_latency_s: float = 0.0  # the launch every collective kernel pays
    # the GPU's SMs (0: not known): a collective's kernels hold some of them while
    # compute runs beside it (`ep_overlap`)
    sm_count: int = 0

    @property
    def node_network(self) -> float:
        return self.node_network_bytes_per_s or self.inter_node_bytes_per_s * self.gpus_per_node

    @property
    def intra_ring_bytes_per_s(self) -> float:
        cap = self.ring_bus_cap_bytes_per_s
        return min(self.intra_node_bytes_per_s, cap) if cap else self.intra_node_bytes_per_s

    def within_node(self, size: int, stride: int = 1) -> bool:
        """Whether a group of `size` ranks, `stride` apart, lies in one node."""
        return size * stride <= self.gpus_per_node

    def ring_bytes_per_s(self, size: int, stride: int = 1) -> float:
        """Bus bandwidth of a ring over a group of `size` ranks `stride` apart."""
        if self.within_node(size, stride):
            return self.intra_ring_bytes_per_s
        members_per_node = max(1, min(size, self.gpus_per_node // max(stride, 1)))
        share = self.node_network * members_per_node / self.gpus_per_node
        return min(self.intra_ring_bytes_per_s, share)

    def point_to_point_bytes_per_s(self, across_nodes: bool) -> float:
        """One GPU sending to one other: its link, or its own NIC across nodes."""
        return self.inter_node_bytes_per_s if across_nodes else self.intra_node_bytes_per_s


def default_node_network_bytes_per_s(spec: HardwareSpec, gpus_per_node: int = 8) -> float:
    """The node network of the spec's own system (its GPUs' NICs), else of the GPU
    generation's reference system (spec data)."""
    if spec.network_bytes_per_s_per_gpu:
        return spec.network_bytes_per_s_per_gpu * gpus_per_node
    return NODE_NETWORK_BY_ARCHITECTURE.get(spec.architecture, DEFAULT_NODE_NETWORK_BYTES_PER_S)


def nvlink_domain(spec: HardwareSpec, gpus_per_node: int, gpus: int | None = None) -> int:
    """GPUs whose collectives run on NVLink: the node's, or the spec's larger NVLink
    domain (GB200 NVL72: 72) as far as the job fills it."""
    domain = spec.nvlink_domain_gpus if spec.nvlink_bandwidth_bytes_per_s else None
    if not domain or domain <= gpus_per_node:
        return gpus_per_node
    return max(gpus_per_node, min(domain, gpus)) if gpus else domain


def interconnect_for(
    spec: HardwareSpec,
    gpus_per_node: int,
    node_network_bytes_per_s: float | None = None,
    gpus: int | None = None,
) -> Interconnect:
    """NVLink (else PCIe) within a node, or within the spec's NVLink domain where it
    spans nodes; the node's network shared by its GPUs across. `gpus`: the job's
    GPUs (an NVLink domain larger than the job is the job)."""
    intra = (
        spec.nvlink_bandwidth_bytes_per_s
        or spec.pcie_bandwidth_bytes_per_s
        or FALLBACK_LINK_BYTES_PER_S
    )
    network = node_network_bytes_per_s or default_node_network_bytes_per_s(spec, gpus_per_node)
    inter = min(intra, network / gpus_per_node)
    domain = nvlink_domain(spec, gpus_per_node, gpus)
    if domain > gpus_per_node:  # the domain's nodes' networks together
        network = network / gpus_per_node * domain
    # NCCL's tuning model caps an sm80 ring's bus bandwidth (nccl src/graph/tuning.cc)
    caps = nccl_constants().get("bus_cap_bytes_per_s", {})
    cap = caps.get(spec.architecture) if spec.nvlink_bandwidth_bytes_per_s else None
    return Interconnect(
        intra,
        inter,
        RING_STEP_LATENCY_S,
        domain,
        network,
        cap,
        intra_link="nvlink" if spec.nvlink_bandwidth_bytes_per_s else "pcie",
        architecture=spec.architecture,
        kernel_latency_s=spec.efficiency.kernel_latency_s,
        sm_count=spec.sm_count,
    )


def ring_time_s(
    collective: str,
    nbytes: float,
    ranks: int,
    bandwidth: float,
    latency: float = RING_STEP_LATENCY_S,
) -> float:
    """Time of a ring collective of `nbytes` (the full buffer) over `ranks` GPUs."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    share = (ranks - 1) / ranks
    if collective == "all_reduce":
        return 2 * share * nbytes / bandwidth + 2 * (ranks - 1) * latency
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return share * nbytes / bandwidth + (ranks - 1) * latency
    raise DlperfError(f"unknown collective {collective!r}")


def send_time_s(nbytes: float, bandwidth: float, latency: float = RING_STEP_LATENCY_S) -> float:
    """One point-to-point send of `nbytes` (a pipeline stage's activations)."""
    return nbytes / bandwidth + latency if nbytes > 0 else 0.0
