"""The collectives of serving: the one NCCL model of `parallel.collectives`.

Tensor-parallel inference all-reduces small activations (b x tokens x hidden
x 2 B: kilobytes in decode), where latency, not bandwidth, sets the time;
`parallel.collectives` prices them as NCCL does (ring and tree; LL, LL128
and Simple; channels; the kernel launch), the same function `dlperf plan`
prices its collectives with. Here only the links are built from the GPU's
spec (`parallel.network.interconnect_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


# vLLM's all-reduce on GPUs that NVLink connects all to all
# (vllm/distributed/device_communicators: cuda_communicator, custom_all_reduce,
# symm_mem, all_reduce_utils), for 2, 4, 6 or 8 GPUs:
# - its custom kernel (csrc/custom_all_reduce.cuh) up to an 8 MiB buffer: each GPU
#   reads its peers' buffers over NVLink itself, no NCCL channels or protocol
#   steps. One stage (every GPU reads every peer's whole buffer and sums) for 2 GPUs
#   and for buffers under 512 KiB on up to 4 GPUs or 256 KiB on up to 8; else two
#   (reduce-scatter, then all-gather).
# - on Hopper and Blackwell, with PyTorch's symmetric memory (vLLM's default,
#   VLLM_ALLREDUCE_USE_SYMM_MEM=1), the custom kernel stops at a smaller bound for
#   6 and 8 GPUs, and PyTorch's symmetric-memory all-reduce takes the buffers above
#   it up to its own bound: through NVSwitch's in-switch reduction (multimem) for
#   the GPU counts vLLM picks it, two-shot (the custom kernel's two stages) for the
#   rest. NCCL past both bounds.
CUSTOM_ALL_REDUCE_RANKS = (2, 4, 6, 8)
CUSTOM_ALL_REDUCE_MAX_BYTES = 8 * 2**20
ONE_STAGE_BELOW_BYTES = {4: 512 * 2**10, 8: 256 * 2**10}
KIB, MIB = 2**10, 2**20


@dataclass(frozen=True)
class SymmetricMemory:
    """vLLM's bounds for one compute capability: the custom kernel's buffer, the
    symmetric-memory all-reduce's, and the GPU counts that reduce in the switch."""

    custom_max: dict[int, int]
    symmetric_max: dict[int, int]
    multimem: tuple[int, ...]


SYMMETRIC_MEMORY = {
    "9.0": SymmetricMemory({2: 8 * MIB, 4: 8 * MIB, 6: 512 * KIB, 8: 256 * KIB},
                           {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB}, (4, 6, 8)),
    "10.0": SymmetricMemory({2: 2 * MIB, 4: 2 * MIB, 6: 1 * MIB, 8: 1 * MIB},
                            {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB}, (6, 8)),
}  # fmt: skip
# One flag a GPU stores into each peer's memory and waits to see from each (the
# kernels' barriers): a store and a load across NVLink, about a microsecond each
# way (a stated figure, not fitted).
NVLINK_FLAG_S = 1e-06


def custom_all_reduce_s(nbytes: float, ranks: int, spec: HardwareSpec) -> float | None:
    """Seconds of vLLM's own all-reduce of `nbytes` over `ranks` GPUs of `spec`
    (the comment above: its custom kernel, or PyTorch's symmetric-memory kernel),
    or None where vLLM runs NCCL."""
    link = spec.nvlink_bandwidth_bytes_per_s
    if not link or ranks not in CUSTOM_ALL_REDUCE_RANKS:
        return None
    launch = spec.efficiency.kernel_latency_s
    symmetric = SYMMETRIC_MEMORY.get(spec.compute_capability)
    custom_max = symmetric.custom_max[ranks] if symmetric else CUSTOM_ALL_REDUCE_MAX_BYTES
    if nbytes < custom_max:
        limit = next((v for k, v in sorted(ONE_STAGE_BELOW_BYTES.items()) if ranks <= k), 0)
        if ranks == 2 or nbytes < limit:  # every peer's buffer read whole; barriers before, after
            return launch + 2 * NVLINK_FLAG_S + (ranks - 1) * nbytes / link
        return _two_shot_s(nbytes, ranks, link, launch)
    if symmetric is None or nbytes > symmetric.symmetric_max[ranks]:
        return None
    if ranks in symmetric.multimem:
        # each GPU's slice is summed by the switch from every GPU's copy and stored back
        # to all: about the buffer each way per GPU, plus its own slice, the two phases
        # of successive slices overlapping on the link's two directions
        return launch + 2 * NVLINK_FLAG_S + nbytes * (1 + 1 / ranks) / link
    return _two_shot_s(nbytes, ranks, link, launch)


def _two_shot_s(nbytes: float, ranks: int, link: float, launch: float) -> float:
    """A 1/ranks slice of every peer's buffer summed, then every peer's summed slice."""
    share = math.ceil(nbytes / ranks)
    return launch + 3 * NVLINK_FLAG_S + 2 * (ranks - 1) * share / link


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
