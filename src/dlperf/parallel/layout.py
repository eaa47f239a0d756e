"""A plan's layout: how many GPUs each kind of parallelism takes, the
sharding, the pipeline schedule, and the micro-batches of one step.

Ranks are numbered tensor-parallel innermost, then context, data and
pipeline parallel (Megatron-LM's order); expert parallelism is carved out of
the data-parallel ranks (Megatron-Core: the expert-data-parallel group is
dp / ep, each expert split over the tp GPUs), or, where ep does not divide
dp, out of the data- and tensor-parallel ranks together (expert tensor
parallelism 1: whole experts, dp x tp / ep expert-data-parallel ranks), so
GPUs = dp x tp x pp x cp.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DlperfError
from ..run_config import SHARDINGS
from .schedule import NO_PIPELINE, Schedule

# Sharding over the data-parallel ranks: ZeRO stage 1 (optimizer states),
# 2 (and gradients), fsdp = ZeRO-3 (and weights, FSDP's FULL_SHARD), hsdp =
# FSDP's HYBRID_SHARD (ZeRO-3 within a node, replicas across nodes).
ZERO_STAGE = {"none": 0, "zero1": 1, "zero2": 2, "fsdp": 3, "hsdp": 3}


def check_sharding(name: str) -> str:
    if name not in ZERO_STAGE:
        raise DlperfError(f"unknown sharding {name!r}; choose from: {', '.join(SHARDINGS)}")
    return name


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    cp: int = 1
    ep: int = 1
    sharding: str = "none"
    schedule: Schedule = NO_PIPELINE
    sequence_parallel: bool = False
    micro_batch: int = 1
    micro_batches: int = 1  # m: micro-batches per step through each pipeline
    gpus_per_node: int = 8

    @property
    def zero(self) -> int:
        return ZERO_STAGE[self.sharding]

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def model_parallel(self) -> int:
        """GPUs that split one copy of the model's blocks (within a stage: tp x cp)."""
        return self.tp * self.cp

    @property
    def shard_ranks(self) -> int:
        """Data-parallel ranks the sharded states are split over: all of them,
        or under hsdp those within one node."""
        if self.zero == 0:
            return 1
        if self.sharding == "hsdp":
            return max(1, min(self.dp, self.gpus_per_node // self.model_parallel))
        return self.dp

    @property
    def state_shards(self) -> int:
        """Ranks one copy of the sharded states is split over: the sharding
        data-parallel ranks and the context-parallel ranks beside each, which
        hold the same weights and reduce the same gradients (Megatron-Core's
        distributed optimizer shards over its dp x cp group, torchtitan's
        FSDP over dp_shard x cp); hsdp's within a node."""
        if self.zero == 0 or self.sharding == "hsdp":
            return self.shard_ranks
        return self.shard_ranks * self.cp

    @property
    def replicas(self) -> int:
        """Copies of the sharded states (hsdp: one per node group)."""
        return self.dp // self.shard_ranks if self.zero else self.dp

    @property
    def expert_tp(self) -> int:
        """GPUs one expert's weights are split over (Megatron-Core's expert tensor
        parallelism): the tp GPUs where ep divides dp (its default, ETP = TP);
        none where the expert-parallel group spans the tp GPUs too (ep dividing
        dp x tp in whole tp groups: ETP = 1, as NVIDIA's MoE recipes set it)."""
        return self.tp if self.dp % self.ep == 0 else 1

    @property
    def expert_state_shards(self) -> int:
        """Ranks one copy of the experts' sharded states is split over: the
        expert-data-parallel group, state_shards x tp / (ep x expert_tp)."""
        return max(1, self.state_shards * self.tp // (self.ep * self.expert_tp))

    @property
    def activation_split(self) -> int:
        """How many ways sequence parallelism splits the replicated activations."""
        return self.tp if self.sequence_parallel else 1

    @property
    def name(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.sharding != "none":
            parts.append(self.sharding)
        if self.sequence_parallel:
            parts.append("sp")
        if self.pp > 1:
            parts.append(self.schedule.name)
        return "-".join(parts)
