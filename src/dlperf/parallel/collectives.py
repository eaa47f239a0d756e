"""One model of NCCL's collectives, for plans (training) and serving alike.

NCCL prices each collective with its own cost model (src/graph/tuning.cc,
ncclTopoTuneModel; the constants are `hardware/specs/_nccl.toml`, with the
formulas) and runs the algorithm and protocol the model says is fastest:

- ring (all-reduce, all-gather, reduce-scatter) and tree (all-reduce);
- protocols LL, LL128 and Simple, each with its own base and per-hop latency
  and its share of the bus bandwidth (capped per channel and per protocol);
- on the channels the message fills (enqueue.cc, getAlgoInfo);
- plus the launch latency every kernel pays (`kernel_latency_s` of the
  GPU's family): NCCL's model times the algorithm once its kernel runs.

NCCL's model is optimistic at medium sizes; its own source says so for
trees and corrects them by a table (`treeCorrectionFactor`, a bandwidth
factor per power-of-two size). The measured A100 all-reduces of the
development set (../shared/data/llmcompass/allreduce.csv) dip the same way
on the ring, so the same table derates whichever algorithm runs
(`bench/comm_accuracy.py` shows the effect, before and after).

The bus bandwidth comes from `network.Interconnect`: NVLink (else PCIe)
within a node, capped where NCCL's model caps it; across nodes one ring per
NIC. An Interconnect that names no link (built by hand, or measured by
`dlperf measure-comm`) is priced by the plain ring model with its own
latency (`network.ring_time_s`).
"""

from __future__ import annotations

import math

from .network import Interconnect, nccl_constants, ring_time_s
from .network import send_time_s as plain_send_time_s

PROTOCOLS = ("ll", "ll128", "simple")
GROUP_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def collective_time_s(
    kind: str, nbytes: float, ranks: int, net: Interconnect, stride: int = 1, top_k: int = 0
) -> float:
    """Seconds of one collective of `nbytes` (the whole buffer) over `ranks`
    GPUs `stride` ranks apart: NCCL's pick of algorithm and protocol, on the
    channels the message fills, plus the kernel launch (an all-to-all's
    `top_k`: `all_to_all_time_s`)."""
    if kind not in GROUP_COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}")
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    bus = net.ring_bytes_per_s(ranks, stride)
    if kind == "all_to_all":  # NCCL runs it as point-to-point sends, all at once
        plain = all_to_all_time_s(nbytes, ranks, net, stride, top_k)
        return plain + (net.kernel_latency_s if net.intra_link else 0.0)
    if net.intra_link is None:  # measured or hand-made links
        return ring_time_s(kind, nbytes, ranks, bus, net.latency_s)
    c = nccl_constants()
    nodes = ranks if stride >= net.gpus_per_node else math.ceil(ranks * stride / net.gpus_per_node)
    nodes = max(1, min(nodes, ranks))
    options = [_ring(kind, nbytes, ranks, nodes, bus, p, net, c) for p in PROTOCOLS]
    if kind == "all_reduce":
        options += [_tree(nbytes, ranks, nodes, bus, p, net, c) for p in PROTOCOLS]
    _, latency, bandwidth, protocol, threshold_ranks = min(options)
    share = _channel_share(nbytes, protocol, threshold_ranks, _channels(net, c), c)
    bandwidth *= share * size_correction(nbytes, protocol)
    return net.kernel_latency_s + latency + nbytes / bandwidth


def all_to_all_time_s(nbytes: float, ranks: int, net: Interconnect, stride: int = 1,
                      top_k: int = 0) -> float:  # fmt: skip
    """An all-to-all of `nbytes` a GPU: it sends one `ranks`-th to every other
    rank at once, to those in its node over NVLink and to the rest through
    its own NIC (`inter_node_bytes_per_s`; a ring spreads its crossing over
    the node's NICs, point-to-point sends cannot); the slower of the two sets
    the time. With `top_k` (a dispatch of `top_k` copies of each token, one
    per expert, as DeepEP's and HybridEP's kernels run it) a token crosses to
    another node once for all its experts there and is copied on within it
    over NVLink: experts drawn evenly over N nodes, a token reaches (N - 1)
    (1 - (1 - 1/N)^k) other nodes on average."""
    if net.within_node(ranks, stride):
        return ring_time_s("all_to_all", nbytes, ranks, net.intra_ring_bytes_per_s, net.latency_s)
    in_node = max(1, min(ranks, net.gpus_per_node // max(stride, 1)))
    local = nbytes * (in_node - 1) / ranks / net.intra_ring_bytes_per_s
    remote = nbytes * (ranks - in_node) / ranks
    if top_k:
        nodes = max(2, ranks // in_node)
        remote = nbytes / top_k * (nodes - 1) * (1 - (1 - 1 / nodes) ** top_k)
        local = nbytes * (ranks - 1) / ranks / net.intra_ring_bytes_per_s  # the copies on
    return max(local, remote / net.inter_node_bytes_per_s) + (ranks - 1) * net.latency_s


def size_correction(nbytes: float, protocol: str) -> float:
    """NCCL's treeCorrectionFactor: bandwidth factor at medium sizes, indexed
    by log2(bytes / 64); 1 beyond the table."""
    table = nccl_constants()["size_correction"][protocol]
    index = int(math.log2(max(nbytes, 64) / 64))
    return table[index] if index < len(table) else 1.0


def _ring(kind, nbytes, ranks, nodes, bus, protocol, net: Interconnect, c: dict) -> tuple:
    steps = 2 * (ranks - 1) if kind == "all_reduce" else ranks - 1
    inter_steps = (2 if kind == "all_reduce" else 1) * (nodes - 1)
    intra_hop = c["hop_latency_s"][net.intra_link]["ring"][protocol]
    if nodes > 1 and protocol == "ll":
        intra_hop *= c["misc"]["multi_node_ll_intra_factor"]
    latency = c["base_latency_s"]["ring"][protocol] + (steps - inter_steps) * intra_hop
    latency += inter_steps * c["hop_latency_s"]["network"]["ring"][protocol]
    bus_bw = _protocol_bus(bus, "ring", protocol, nodes, net, c)
    bandwidth = bus_bw * ranks / steps
    return (latency + nbytes / bandwidth, latency, bandwidth, protocol, ranks)


def _tree(nbytes, ranks, nodes, bus, protocol, net: Interconnect, c: dict) -> tuple:
    intra_hop = c["hop_latency_s"][net.intra_link]["tree"][protocol]
    if nodes > 1 and protocol == "ll":
        intra_hop *= c["misc"]["multi_node_ll_intra_factor"]
    per_node = math.ceil(ranks / nodes)
    net_hop = c["hop_latency_s"]["network"]["tree"][protocol]
    latency = c["base_latency_s"]["tree"][protocol]
    latency += 2 * ((per_node - 1) * intra_hop + int(math.log2(nodes)) * net_hop)
    bus_bw = _protocol_bus(bus, "tree", protocol, nodes, net, c)
    bandwidth = bus_bw * c["misc"]["tree_bandwidth_ratio"]
    return (latency + nbytes / bandwidth, latency, bandwidth, protocol, 1)


def _protocol_bus(bus, algorithm, protocol, nodes, net: Interconnect, c: dict) -> float:
    """The bus bandwidth a protocol reaches: its share of the link, at most
    NCCL's per-protocol caps (llMaxBws, ll128MaxBwPerCh x channels)."""
    bus_bw = bus * c["bandwidth_share"][algorithm][protocol]
    if protocol == "ll":
        caps = c["ll_max_bus_bytes_per_s"].get(net.architecture)
        if caps:
            bus_bw = min(bus_bw, caps[min(nodes, 3) - 1])
    if protocol == "ll128":
        bus_bw = min(bus_bw, c["ll128_max_bytes_per_s"]["per_channel"] * _channels(net, c))
    return bus_bw


def _channels(net: Interconnect, c: dict) -> int:
    return int(c["channels"].get(net.architecture, c["channels"]["default"]))


def collective_sm_share(net: Interconnect) -> float:
    """The share of the GPU's SMs a collective's kernels hold while they run:
    NCCL's channels, one thread block (one SM) each; 0 where the SMs are not known."""
    if not net.sm_count:
        return 0.0
    return min(1.0, _channels(net, nccl_constants()) / net.sm_count)


def _channel_share(nbytes: float, protocol: str, ranks: int, channels: int, c: dict) -> float:
    """The share of the channels a message of `nbytes` runs on (NCCL's
    getAlgoInfo: one channel less while bytes < channels x threads x threshold)."""
    threshold = c["thread_threshold_bytes"][protocol] * (ranks if protocol == "ll" else 1)
    per_channel = c["threads"][protocol] * threshold
    used = min(channels, max(1, int(nbytes // per_channel)))
    return used / channels


def send_time_s(nbytes: float, net: Interconnect, across_nodes: bool) -> float:
    """A point-to-point send of `nbytes` (pipeline stages, context-parallel
    ring steps): one hop of NCCL's model over the GPU's link or the network."""
    if nbytes <= 0:
        return 0.0
    bandwidth = net.point_to_point_bytes_per_s(across_nodes)
    if net.intra_link is None:
        return plain_send_time_s(nbytes, bandwidth, net.latency_s)
    c = nccl_constants()
    link = "network" if across_nodes else net.intra_link
    return net.kernel_latency_s + min(
        c["base_latency_s"]["ring"][p]
        + c["hop_latency_s"][link]["ring"][p]
        + nbytes / (bandwidth * c["bandwidth_share"]["ring"][p])
        for p in PROTOCOLS
    )
