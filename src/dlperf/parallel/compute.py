"""Compute time of one plan's pipeline stages, per micro-batch on one GPU.

Tensor parallelism divides the work of the ops in its split regions by tp
(`tensor_parallel.py`); the replicated ops (layer norms, dropout, residual
adds) run whole on every GPU unless sequence parallelism splits them too.
Context parallelism divides everything by cp (each GPU runs its share of the
sequence; attention's causal work is balanced over the ranks, as
Megatron-LM's load-balanced chunks do). The GEMMs are priced at the traced
shapes; smaller shards run at the same efficiency (a simplification: a
sliver of a GEMM can run less efficiently).

The first stage runs its blocks and the embeddings, the last its blocks,
the head and the loss; a pipeline goes at the pace of the slower of them.
Offloaded activations add what of their copies over the host link the
blocks' compute does not hide (`offload_exposed_s`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .ep_overlap import LayerChunks
from .expert_host import experts_exposed_s
from .layout import Layout
from .memory import block_activations, offloaded_blocks, stage_blocks
from .profile import ModelProfile


@dataclass(frozen=True)
class StageTimes:
    block_forward_s: float  # one block, one micro-batch, one GPU
    block_backward_s: float  # with its recompute
    stage_s: float  # the slowest stage, forward and backward of one micro-batch
    optimizer_s: float  # the optimizer step on one GPU's share of the states
    offload_s: float = 0.0  # of stage_s, the activation copies to and from the host not hidden
    # the host's issue of one MoE layer's experts beyond their GPU time
    # (`expert_host`), forward and backward; the block times hold their share
    # of it (MoE layers / blocks)
    experts_host_forward_s: float = 0.0
    experts_host_backward_s: float = 0.0
    # one MoE layer's compute split as the EP overlap pairs it, the host's issue
    # in the experts' part (None: no MoE layers)
    moe_chunks: LayerChunks | None = None


def _split(seconds: float, share: float, at: Layout) -> float:
    """Seconds on one GPU: the split share over tp, the rest over tp only with SP; all over cp."""
    return (seconds * share / at.tp + seconds * (1 - share) / at.activation_split) / at.cp


def layer_chunks(profile: ModelProfile, at: Layout, block_f: float,
                 block_b: float) -> LayerChunks:  # fmt: skip
    """One MoE layer's compute on one GPU per micro-batch, its experts apart:
    the block's times at this layout (`block_f`, `block_b`), the experts' share
    of them as traced and rescaled to `at.ep`, all of a block's expert time in
    its MoE layer (a model with dense blocks has fewer MoE layers than blocks)."""
    forward, backward = profile.block_seconds(at.ep)
    scale_f, scale_b = profile.moe_ep_scales.get(at.ep, (1.0, 1.0))
    per_layer = max(profile.blocks, 1) / max(profile.moe_layers, 1)
    experts_f = profile.block_moe_forward_s * scale_f / forward * block_f if forward else 0.0
    experts_b = profile.block_moe_backward_s * scale_b / backward * block_b if backward else 0.0
    return LayerChunks(
        attention_forward_s=max(0.0, block_f - experts_f),
        attention_backward_s=max(0.0, block_b - experts_b),
        experts_forward_s=experts_f * per_layer,
        experts_backward_s=experts_b * per_layer,
    )


def _moe_layer(profile: ModelProfile, at: Layout, block_f: float,
               block_b: float) -> tuple[LayerChunks | None, float, float]:  # fmt: skip
    """One MoE layer's chunks with the experts' issue beyond their GPU time in
    theirs, and that issue, forward and backward (`expert_host`)."""
    if not (profile.moe_layers and profile.experts):
        return None, 0.0, 0.0
    chunks = layer_chunks(profile, at, block_f, block_b)
    if not profile.expert_gemm_host_s:
        return chunks, 0.0, 0.0
    local = max(1, profile.experts // at.ep)
    host_f, host_b = experts_exposed_s(local, chunks, profile.expert_gemm_host_s)
    chunks = replace(chunks, experts_forward_s=chunks.experts_forward_s + host_f,
                     experts_backward_s=chunks.experts_backward_s + host_b)  # fmt: skip
    return chunks, host_f, host_b


def stage_times(profile: ModelProfile, at: Layout) -> StageTimes:
    share = profile.block_split_share
    forward, backward = profile.block_seconds(at.ep)
    block_f = _split(forward, share, at)
    block_b = _split(backward, share, at)
    chunks, host_f, host_b = _moe_layer(profile, at, block_f, block_b)
    moe_share = profile.moe_layers / max(profile.blocks, 1)
    block_f += host_f * moe_share
    block_b += host_b * moe_share
    blocks = stage_blocks(profile, at) * (block_f + block_b)
    pre = (profile.pre_forward_s + profile.pre_backward_s) / at.cp
    post = _split(profile.post_forward_s + profile.post_backward_s, profile.post_split_share, at)
    stage = blocks + pre + post if at.pp == 1 else blocks + max(pre, post)
    offload = offload_exposed_s(profile, at, block_f, block_b)
    dense, experts = held_params(profile, at)
    held = dense / (at.state_shards if at.zero else 1)
    held += experts / (at.expert_state_shards if at.zero else 1)
    share_of_states = held / max(profile.params, 1)
    optimizer = profile.optimizer_s * share_of_states
    return StageTimes(block_f, block_b, stage + offload, optimizer, offload, host_f, host_b,
                      chunks)


def held_params(profile: ModelProfile, at: Layout) -> tuple[float, float]:
    """(dense and outside-the-blocks, expert) parameters one GPU holds before
    any sharding of their states: its stage's tp share, its experts' ep x
    expert-tp share."""
    dense = profile.block_params - profile.expert_params
    outside = profile.params - profile.block_params
    return (dense / at.pp + outside) / at.tp, profile.expert_params / (at.pp * at.ep * at.expert_tp)


def offload_exposed_s(profile: ModelProfile, at: Layout, forward_s: float,
                      backward_s: float) -> float:  # fmt: skip
    """The offloaded blocks' copies the compute does not hide, per micro-batch:
    a block's saved activations go to the host while the next block runs its
    forward and come back while the one after it runs its backward (Transformer
    Engine's offload handler, on a stream of its own); a copy longer than
    that block's compute shows by the difference."""
    offloaded = offloaded_blocks(profile, at)
    if not offloaded:
        return 0.0
    copy = block_activations(profile, at)[0] / profile.host_bytes_per_s
    return offloaded * (max(0.0, copy - forward_s) + max(0.0, copy - backward_s))
