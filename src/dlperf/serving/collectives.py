"""The collectives of serving, priced as NCCL prices them for itself.

Tensor-parallel inference all-reduces small activations (b x tokens x hidden
x 2 B: kilobytes in decode), where latency, not bandwidth, sets the time. The
ring model of `parallel.network` (one latency per ring step, the Simple
protocol's bandwidth) fits training's large gradients; here each collective
takes the fastest of NCCL's algorithms and protocols by NCCL's own cost model
(ring and tree; LL, LL128 and Simple), whose constants are spec data
(`hardware/specs/_nccl.toml`, with the formulas), plus the launch latency
every kernel pays (`kernel_latency_s` of the GPU's family, calibrated on the
kernel data): NCCL's model times the algorithm once its kernel runs. On the
A100 this gives 12.6 us for a 4-GPU all-reduce of a few bytes, where
LLMCompass measured 12.5 us (../shared/data/llmcompass/allreduce.csv; a
check, nothing is fitted on it).

The bus bandwidth of a ring is `parallel.network`'s (`Interconnect.
ring_bytes_per_s`): NVLink (else PCIe) within a node, capped where NCCL's
model caps it; across nodes one ring per NIC, so a tensor-parallel group
with all of a node's GPUs has the node's whole network, not one GPU's share.
"""

from __future__ import annotations

import functools
import math

from ..hardware import HardwareSpec
from ..hardware.spec import SPECS_DIR, tomllib
from ..parallel.network import interconnect_for

NCCL_FILE = SPECS_DIR / "_nccl.toml"
PROTOCOLS = ("ll", "ll128", "simple")


@functools.cache
def _constants() -> dict:
    with open(NCCL_FILE, "rb") as f:
        return tomllib.load(f)


def _intra_link(spec: HardwareSpec) -> str:
    return "nvlink" if spec.nvlink_bandwidth_bytes_per_s else "pcie"


def collective_time_s(
    kind: str,
    nbytes: float,
    ranks: int,
    spec: HardwareSpec,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
) -> float:
    """Seconds of an all-reduce or all-gather of `nbytes` (the whole buffer)
    over `ranks` GPUs, `gpus_per_node` to a node: NCCL picks the algorithm and
    protocol its model says is fastest, then runs it on the channels the
    message's size fills."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    c = _constants()
    links = interconnect_for(spec, gpus_per_node, node_network_bytes_per_s)
    nodes = math.ceil(ranks / gpus_per_node)
    bus = links.ring_bytes_per_s(ranks)
    if kind == "all_reduce":
        steps, inter_steps = 2 * (ranks - 1), 2 * (nodes - 1)
    else:  # all_gather, reduce_scatter
        steps, inter_steps = ranks - 1, nodes - 1
    options = []  # (NCCL's modelled time, latency, bandwidth, protocol)
    for p in PROTOCOLS:
        intra_hop = c["hop_latency_s"][_intra_link(spec)]["ring"][p]
        if nodes > 1 and p == "ll":
            intra_hop *= c["misc"]["multi_node_ll_intra_factor"]
        latency = c["base_latency_s"]["ring"][p] + (steps - inter_steps) * intra_hop
        latency += inter_steps * c["hop_latency_s"]["network"]["ring"][p]
        bandwidth = bus * c["bandwidth_share"]["ring"][p] * ranks / steps
        options.append((latency + nbytes / bandwidth, latency, bandwidth, p, ranks))
        if kind == "all_reduce":
            options.append(_tree(nbytes, ranks, nodes, bus, p, c, _intra_link(spec)))
    _, latency, bandwidth, protocol, scale = min(options)
    share = _channel_share(nbytes, protocol, scale, _channels(spec, c), c)
    return spec.efficiency.kernel_latency_s + latency + nbytes / (bandwidth * share)


def _channels(spec, c: dict) -> int:
    return int(c["channels"].get(spec.architecture, c["channels"]["default"]))


def _channel_share(nbytes: float, protocol: str, ranks: int, channels: int, c: dict) -> float:
    """The share of the channels a message of `nbytes` runs on (NCCL's
    getAlgoInfo: one channel less while bytes < channels x threads x threshold)."""
    threshold = c["thread_threshold_bytes"][protocol] * (ranks if protocol == "ll" else 1)
    per_channel = c["threads"][protocol] * threshold
    used = min(channels, max(1, int(nbytes // per_channel)))
    return used / channels


def _tree(nbytes, ranks, nodes, bus, protocol, c, link) -> tuple:
    intra_hop = c["hop_latency_s"][link]["tree"][protocol]
    if nodes > 1 and protocol == "ll":
        intra_hop *= c["misc"]["multi_node_ll_intra_factor"]
    per_node = math.ceil(ranks / nodes)
    net_hop = c["hop_latency_s"]["network"]["tree"][protocol]
    latency = c["base_latency_s"]["tree"][protocol]
    latency += 2 * ((per_node - 1) * intra_hop + int(math.log2(nodes)) * net_hop)
    bandwidth = bus * c["bandwidth_share"]["tree"][protocol] * c["misc"]["tree_bandwidth_ratio"]
    return (latency + nbytes / bandwidth, latency, bandwidth, protocol, 1)


def send_time_s(
    nbytes: float,
    spec: HardwareSpec,
    across_nodes: bool,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
) -> float:
    """A point-to-point send of `nbytes` (pipeline stages): one hop of NCCL's
    cost model over the GPU's link or, `across_nodes`, over the network."""
    if nbytes <= 0:
        return 0.0
    c = _constants()
    links = interconnect_for(spec, gpus_per_node, node_network_bytes_per_s)
    link = "network" if across_nodes else _intra_link(spec)
    bus = links.point_to_point_bytes_per_s(across_nodes)
    return spec.efficiency.kernel_latency_s + min(
        c["base_latency_s"]["ring"][p]
        + c["hop_latency_s"][link]["ring"][p]
        + nbytes / (bus * c["bandwidth_share"]["ring"][p])
        for p in PROTOCOLS
    )
