"""The links between GPUs and the ring model of collectives.

All-reduce moves 2(n-1)/n of the buffer through every GPU's link,
all-gather and reduce-scatter (n-1)/n, plus one latency per ring step. The
defaults where nothing is known are data: `hardware/specs/_interconnect.toml`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..hardware.spec import SPECS_DIR, tomllib

INTERCONNECT_FILE = SPECS_DIR / "_interconnect.toml"
with open(INTERCONNECT_FILE, "rb") as _f:
    _DEFAULTS = tomllib.load(_f)
RING_STEP_LATENCY_S: float = _DEFAULTS["ring_step_latency_s"]
DEFAULT_NODE_NETWORK_BYTES_PER_S: float = _DEFAULTS["node_network_bytes_per_s"]
FALLBACK_LINK_BYTES_PER_S: float = _DEFAULTS["fallback_link_bytes_per_s"]


@dataclass(frozen=True)
class Interconnect:
    intra_node_bytes_per_s: float  # per GPU, one direction
    inter_node_bytes_per_s: float  # per GPU, one direction
    latency_s: float = RING_STEP_LATENCY_S
    gpus_per_node: int = 8


def interconnect_for(
    spec: HardwareSpec, gpus_per_node: int, node_network_bytes_per_s: float | None = None
) -> Interconnect:
    """NVLink (else PCIe) within a node; the node's network shared by its GPUs across."""
    intra = (
        spec.nvlink_bandwidth_bytes_per_s
        or spec.pcie_bandwidth_bytes_per_s
        or FALLBACK_LINK_BYTES_PER_S
    )
    network = node_network_bytes_per_s or DEFAULT_NODE_NETWORK_BYTES_PER_S
    inter = min(intra, network / gpus_per_node)
    return Interconnect(intra, inter, RING_STEP_LATENCY_S, gpus_per_node)


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
    if collective in ("all_gather", "reduce_scatter"):
        return share * nbytes / bandwidth + (ranks - 1) * latency
    raise DlperfError(f"unknown collective {collective!r}")
