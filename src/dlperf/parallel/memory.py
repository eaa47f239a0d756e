"""Memory per GPU of one plan, as real runs see it: the largest of the
pipeline's first and last stage, at the end of backward (an upper bound:
every term below is held at once).

States, per parameter a GPU holds (its stage's blocks split by tp, experts
by ep; the embedding and output layer, vocabulary-parallel, by tp):
- no sharding: PyTorch's own (`training_memory.state_bytes_per_param`:
  fp32 masters and autocast's 16-bit copy, gradients in the weights' dtype;
  optimizer states in the weights' dtype, as torch.optim allocates them);
  DDP's bucket copy of the gradients (gradient_as_bucket_view=False, its
  default) as a buffer.
- ZeRO (Rajbhandari et al. 2020), (2 + 2 + K) bytes per parameter under
  16-bit math, K = 12 for Adam (fp32 master weights and two fp32 moments):
  zero1 shards K over the data-parallel ranks (with the context-parallel
  ones beside them, which hold the same weights), zero2 also the gradients,
  fsdp (ZeRO-3, FSDP FULL_SHARD; FSDP's MixedPrecision "PURE" keeps an fp32
  sharded master the same way) also the weights; hsdp shards within a node.
  Under fp32 math the weights and gradients take 4 bytes and K has no
  separate master.
- fsdp and hsdp gather each wrapped block whole in the math dtype: with
  prefetch two blocks' weights are unsharded at once, plus one block's
  unsharded gradients before their reduce-scatter; the root unit (the
  embeddings and head) stays gathered through forward and backward.

Activations per micro-batch, from the profile: inside tensor-parallel split
regions divided by tp, the replicated rest by tp only under sequence
parallelism, everything by cp (the sequence is split). Checkpointing keeps
per segment only its input (split under sequence parallelism, as Megatron
stores it) and brings one segment's activations back at a time; selective
recompute drops the attention cores and brings one back at a time. The
first stage holds the schedule's in-flight micro-batches (`schedule.py`)
and the embeddings' activations; the last stage one micro-batch and the
head's and loss's (vocabulary-parallel: split by tp). Blocks whose
activations are offloaded to host memory keep none on the GPU at the peak
(`held_blocks`). Then the largest
backward working set of one op, and the framework: CUDA context and cuBLAS
workspace (`hardware/specs/_framework_memory.toml`) and the caching
allocator's reserve, the share of the activations and transient that the
replay of the profiled step found (`ModelProfile.allocator_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import HardwareSpec
from ..jsonable import fields_dict
from ..training_memory import (
    optimizer_bytes,
    overhead_bytes,
    parse_checkpoint,
    state_bytes_per_param,
)
from .layout import Layout
from .profile import ModelProfile

# ZeRO keeps fp32 master weights beside 16-bit ones (the paper's K includes them).
ZERO_MASTER_BYTES = 4
# The optimizer's states under ZeRO are fp32 (the paper's K = 12 for Adam: 4 + 4 + 4).
ZERO_STATE_WORD_BYTES = 4
# FSDP prefetch: the block computing and the next one are unsharded at once.
FSDP_GATHERED_BLOCKS = 2
# One block's unsharded gradients wait for their reduce-scatter (FSDP's post-backward hook).
FSDP_GATHERED_GRAD_BLOCKS = 1


@dataclass(frozen=True)
class MemoryPerGpu:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float  # states, and ZeRO's fp32 masters
    activations_bytes: float
    transient_bytes: float
    buffers_bytes: float  # FSDP's unsharded blocks, DDP's gradient buckets
    overhead_bytes: float
    stage: str  # the stage that needs the most: "first", "last" or "only"

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
            + self.buffers_bytes
            + self.overhead_bytes
        )

    def to_dict(self) -> dict:
        return fields_dict(self) | {"total_bytes": self.total_bytes}


def math_weight_bytes(profile: ModelProfile) -> int:
    """Bytes per element of the weights the math reads: autocast's copy, else
    the weights themselves (2 under mixed or half precision, 4 under fp32)."""
    policy = profile.precision
    return policy.cast_weight_bytes or policy.master_weight_bytes


def _states_per_param(profile: ModelProfile, word_bytes: int) -> float:
    n = max(profile.params, 1)
    return optimizer_bytes(profile.optimizer, n, profile.param_shapes, word_bytes) / n


def zero_state_bytes(
    profile: ModelProfile, zero: int, shards: int, params: float
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for `params` parameters,
    ZeRO stage `zero` over `shards` ranks (0: PyTorch's own, unsharded)."""
    policy = profile.precision
    if zero == 0:
        weight, grad = state_bytes_per_param(policy)
        states = _states_per_param(profile, policy.master_weight_bytes)
        return weight * params, grad * params, states * params
    math_bytes = math_weight_bytes(profile)
    masters = ZERO_MASTER_BYTES if math_bytes < ZERO_MASTER_BYTES else 0
    k = masters + _states_per_param(profile, ZERO_STATE_WORD_BYTES)
    weights = math_bytes * params / (shards if zero >= 3 else 1)
    # sharded gradients are kept as reduced (the reduce dtype); zero1's whole
    # ones as backward made them, in the math dtype
    grads = (profile.reduce_bytes * params / shards) if zero >= 2 else math_bytes * params
    return weights, grads, k * params / shards


def stage_blocks(profile: ModelProfile, at: Layout) -> int:
    """Blocks on the busiest stage (an uneven split puts one more on some)."""
    return math.ceil(profile.blocks / at.pp) if profile.blocks else 0


def _stage_params(profile: ModelProfile, at: Layout, stage: str) -> tuple[float, float, float]:
    """(block, expert, outside-the-blocks) parameters one GPU of `stage` holds."""
    blocks = stage_blocks(profile, at)
    experts = profile.expert_params * blocks / max(profile.blocks, 1)
    dense_blocks = profile.params_per_block * blocks - experts
    if stage == "only":
        outside = profile.params - profile.block_params
    else:
        outside = profile.pre_params if stage == "first" else profile.post_params
    return dense_blocks / at.tp, experts / (at.expert_tp * at.ep), outside / at.tp


def _states(profile: ModelProfile, at: Layout, stage: str) -> tuple[float, float, float]:
    blocks, experts, outside = _stage_params(profile, at, stage)
    shards = at.state_shards
    w, g, o = zero_state_bytes(profile, at.zero, shards, blocks + outside)
    ew, eg, eo = zero_state_bytes(profile, at.zero, at.expert_state_shards, experts)
    return w + ew, g + eg, o + eo


def _buffers(profile: ModelProfile, at: Layout, stage: str, grads: float) -> float:
    if at.dp > 1 and at.zero == 0:
        return grads  # DDP's buckets hold a copy of the gradients
    if at.zero < 3 or at.dp == 1:
        return 0.0
    blocks, experts, outside = _stage_params(profile, at, stage)
    per_block = (blocks + experts) / max(stage_blocks(profile, at), 1)
    weights = math_weight_bytes(profile) * (FSDP_GATHERED_BLOCKS * per_block + outside)
    # a block's unsharded gradients, cast to the reduce dtype for their reduce-scatter
    return weights + profile.reduce_bytes * FSDP_GATHERED_GRAD_BLOCKS * per_block


def block_activations(profile: ModelProfile, at: Layout) -> tuple[float, float]:
    """(kept per block per micro-batch in flight, working set brought back once)
    on one GPU under the profile's checkpointing policy."""
    replicated = profile.block_replicated_bytes / at.activation_split
    whole = (profile.block_split_bytes / at.tp + replicated) / at.cp
    segment = profile.segment_blocks(stage_blocks(profile, at))
    if profile.checkpoint == "selective-op":  # each block: its input and the saved outputs
        by_op = (profile.block_op_split_bytes / at.tp + profile.block_op_replicated_bytes
                 / at.activation_split) / at.cp  # fmt: skip
        kept = profile.block_input_bytes / at.activation_split / at.cp + by_op
        return kept, max(0.0, whole - by_op)
    if segment:
        kept = profile.block_input_bytes / at.activation_split / at.cp / segment
        return kept, segment * whole
    if parse_checkpoint(profile.checkpoint)[0] == "selective":
        core = profile.block_core_bytes / at.tp / at.cp
        return whole - core, core
    return whole, 0.0


def offloaded_blocks(profile: ModelProfile, at: Layout) -> int:
    """Blocks of a stage whose saved activations go to host memory (`--offload-layers`)."""
    return min(profile.offload_layers, stage_blocks(profile, at))


def held_blocks(profile: ModelProfile, at: Layout) -> int:
    """Blocks of a stage whose saved activations are on the GPU at the end of
    forward, the peak: with offloading (Megatron-Core's, through Transformer
    Engine's offload handler: pp 1 only) the first blocks' are in host memory
    then; each comes back once backward has freed the blocks after it."""
    return stage_blocks(profile, at) - offloaded_blocks(profile, at)


def _stage_activations(profile: ModelProfile, at: Layout, stage: str) -> tuple[float, float]:
    """(activations, transient) of one GPU of `stage`."""
    m = at.micro_batches
    kept, working = block_activations(profile, at)
    index = 0 if stage in ("first", "only") else at.pp - 1
    in_flight = at.schedule.in_flight(at.pp, m, index)
    acts = in_flight * held_blocks(profile, at) * kept + working
    transient = profile.block_transient_bytes / at.tp / at.cp
    if stage in ("first", "only"):
        acts += in_flight * profile.pre_activations_bytes / at.activation_split / at.cp
        # the embedding's gradient dominates: vocabulary-parallel, split by tp
        transient = max(transient, profile.pre_transient_bytes / at.tp / at.cp)
    if stage in ("last", "only"):
        post_replicated = profile.post_activations_bytes - profile.post_split_bytes
        post = profile.post_split_bytes / at.tp + post_replicated / at.activation_split
        acts += in_flight * post / at.cp
        split = at.tp if profile.post_split_bytes else 1  # a vocabulary-parallel loss
        transient = max(transient, profile.post_transient_bytes / split / at.cp)
    return acts, transient


def stage_memory(profile: ModelProfile, spec: HardwareSpec, at: Layout, stage: str) -> MemoryPerGpu:
    weights, grads, states = _states(profile, at, stage)
    acts, transient = _stage_activations(profile, at, stage)
    buffers = _buffers(profile, at, stage, grads)
    overhead = overhead_bytes(spec) + profile.allocator_share * (acts + transient)
    return MemoryPerGpu(weights, grads, states, acts, transient, buffers, overhead, stage)


def memory_per_gpu(profile: ModelProfile, spec: HardwareSpec, at: Layout) -> MemoryPerGpu:
    """The memory of the GPU that needs the most (first or last pipeline stage)."""
    stages = ("only",) if at.pp == 1 else ("first", "last")
    return max((stage_memory(profile, spec, at, s) for s in stages), key=lambda m: m.total_bytes)
