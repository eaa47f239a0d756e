"""The collectives of one plan's step: the bytes each moves, the time the
link is busy, and the time it adds to the step (exposed).

Per micro-batch, on the critical path of every stage (exposed whole unless
said):
- tp: two all-reduces of the block's output activation per block forward
  and two backward (Megatron-LM), one more per row-parallel GEMM a
  checkpointed block runs again (two under full recompute, fewer under
  selective-op), and one each for the embedding and the head; with
  sequence parallelism each becomes an all-gather and a reduce-scatter
  (the same ring volume). In the math dtype (bf16/fp16 under AMP); under
  fp8 with sequence parallelism a block's all-gathers move the fp8 inputs
  of its linear layers (1 B an element; Transformer Engine reduces the amax
  over the tp group, casts the local shard and gathers fp8, in forward and
  for the output gradient in backward) and its reduce-scatters stay bf16;
  the embedding's and the head's stay bf16.
- cp: ring attention passes the K and V chunks around the cp ranks (cp - 1
  steps forward; K, V and their gradients backward, twice the bytes),
  overlapped with the attention's own compute: exposed = max(0, comm -
  attention).
- ep: two all-to-alls per MoE layer forward (dispatch, combine) and two
  backward, of tokens x top-k x hidden x activation bytes, (ep-1)/ep of
  them leaving each GPU; with `--overlap-ep-comm` each runs beside the
  compute of another micro-batch's layer it is paired with, and holds some
  of the SMs that compute runs on (`ep_overlap`); with the flex
  dispatcher (`--moe-dispatcher flex`: DeepEP, HybridEP) a token crosses to
  another node once for all its experts there (`collectives.all_to_all_time_s`).
- fsdp/hsdp: every wrapped block is all-gathered for forward and again for
  backward (FULL_SHARD frees it after forward) and its gradients
  reduce-scattered, for every micro-batch; prefetch overlaps each with the
  neighbouring block's compute: exposed = the first gather, plus per block
  max(0, comm - compute), plus the last reduce-scatter. The weights move in
  the math dtype, the gradients in the reduce dtype (`--reduce-dtype`: fp32
  unless told). Under fp8 the blocks' weights move in fp8 (1 B): Megatron's
  fp8 recipes keep fp8 parameters and gather them (`fp8_param_gather`), the
  embedding and the head (not Transformer Engine layers) in bf16. hsdp
  adds an all-reduce of each gradient shard across the node replicas.
- zero2: the gradients are reduce-scattered for every micro-batch
  (bucketed, overlapped with its backward).
- pp: each micro-batch crosses each stage boundary once forward and once
  backward, V times under the interleaved schedule, in the math dtype, one
  tp-th of the tensor per GPU (Megatron-LM's scatter/gather); the critical
  path holds 2 (m V + p - 1) sends.

Per step: DDP's all-reduce (no sharding) and zero1's reduce-scatter of the
gradients, bucketed and overlapped with the last micro-batch's backward
(exposed: what does not fit in it, at least the last bucket); zero1 and
zero2 all-gather the updated weights after the optimizer step (exposed;
the blocks' in fp8 under fp8, as FSDP's).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware.spec import SPECS_DIR, tomllib
from ..jsonable import Jsonable
from ..training_memory import recomputes_attention
from .collectives import collective_sm_share, collective_time_s, send_time_s
from .compute import StageTimes, held_params
from .ep_overlap import overlapped_exposed_s
from .layout import Layout
from .memory import math_weight_bytes, stage_blocks
from .network import Interconnect
from .profile import ModelProfile

with open(SPECS_DIR / "_framework_comm.toml", "rb") as _f:
    DDP_BUCKET_BYTES: float = tomllib.load(_f)["ddp_bucket_bytes"]


@dataclass(frozen=True)
class Collective(Jsonable):
    """One kind of collective in a step, per GPU: bytes of the buffers it moves,
    the seconds the link is busy, and the seconds it adds to the step."""

    # "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", or
    # "all_gather+reduce_scatter" (sequence parallelism's pair in place of an all-reduce)
    op: str
    group: str  # "dp", "tp", "pp", "cp", "ep", "dp-replicas"
    bytes: float
    time_s: float
    exposed_time_s: float
    count: float = 0  # calls per step

    @property
    def name(self) -> str:
        return f"{self.group} {self.op}"

    def __getitem__(self, key: str):
        """Read as the dict it used to be (`c["bytes"]`), for older readers."""
        return getattr(self, key)


@dataclass(frozen=True)
class _Ring:
    """One collective's size and single-call time over its group."""

    op: str
    group: str
    nbytes: float
    one_s: float


def _ring(op: str, group: str, nbytes: float, ranks: int, stride: int, net: Interconnect) -> _Ring:
    return _Ring(op, group, nbytes, collective_time_s(op, nbytes, ranks, net, stride))


def _per_micro_batch(
    profile: ModelProfile, net: Interconnect, at: Layout, times: StageTimes
) -> list[tuple[_Ring, float, float]]:
    """(collective, calls per micro-batch, exposed seconds per micro-batch)."""
    out = []
    blocks = stage_blocks(profile, at)
    act = profile.boundary_elements * profile.activation_itemsize / at.cp
    if at.tp > 1:
        recomputed = profile.block_recomputed_reduces if profile.segment_blocks(blocks) else 0
        per_block = 4 + recomputed
        calls = per_block * blocks + 2
        ring = _ring("all_reduce", "tp", act, at.tp, 1, net)
        if at.sequence_parallel:  # an all-gather and a reduce-scatter: the same volume
            ring = _Ring("all_gather+reduce_scatter", "tp", act, ring.one_s)
            if profile.precision.fp8_linear:
                fmt = profile.precision.linear_format
                share = fmt.gathered_layouts * fmt.bytes_per_element / profile.activation_itemsize
                ring = _fp8_gathers(ring, act, share, per_block * blocks, calls, at.tp, net)
        out.append((ring, calls, calls * ring.one_s))
    if at.cp > 1 and profile.kv_elements:
        local = profile.kv_elements * profile.activation_itemsize / (at.tp * at.cp)
        bandwidth = net.ring_bytes_per_s(at.cp, at.tp)
        steps = at.cp - 1
        one = local / bandwidth + net.latency_s
        attention = profile.block_attention_s / (at.tp * at.cp)
        # forward once, backward twice (K, V and their gradients), and once more
        # where backward recomputes the attention (any checkpointing but a
        # selective one that leaves the attention core out)
        rounds = 3 + recomputes_attention(profile.checkpoint)
        exposed = max(0.0, rounds * steps * one - attention)
        out.append((_Ring("send", "cp", local, one), rounds * steps * blocks, exposed * blocks))
    if at.ep > 1 and profile.moe_layers:
        tokens = profile.moe_tokens / (at.cp * at.activation_split)
        nbytes = tokens * profile.top_k * profile.moe_hidden * profile.activation_itemsize
        # ep carved out of dp: ranks tp x cp apart; out of dp x tp (ETP 1): neighbours
        stride = at.tp * at.cp if at.dp % at.ep == 0 else 1
        once = profile.top_k if profile.ep_once_per_node else 0
        one = collective_time_s("all_to_all", nbytes, at.ep, net, stride, top_k=once)
        calls = 4 * profile.moe_layers * blocks / max(profile.blocks, 1)
        exposed = calls * one
        if profile.ep_comm_overlap:
            share = collective_sm_share(net)
            per_layer = overlapped_exposed_s(one, times.moe_chunks, at.micro_batches, share)
            exposed = calls / 4 * per_layer  # four all-to-alls a MoE layer
        out.append((_Ring("all_to_all", "ep", nbytes, one), calls, exposed))
    if at.zero >= 3 and at.dp > 1:
        out += _fsdp(profile, net, at, times)
    if at.zero == 2 and at.dp > 1:
        grads = _grad_bytes(profile, at)
        ring = _ring("reduce_scatter", "dp", grads, at.dp, at.model_parallel, net)
        out.append((ring, 1, _bucketed_exposure(ring, blocks * times.block_backward_s)))
    return out


def _fp8_gathers(
    ring: _Ring, act: float, share: float, in_blocks: float, calls: float, tp: int,
    net: Interconnect,
) -> _Ring:  # fmt: skip
    """Sequence parallelism's pairs under fp8 (module docstring): the blocks'
    all-gathers of the cast input (`share` of act's bytes: 1/2 for fp8 from
    bf16; MXFP8 and NVFP4 gather both layouts with their block scales), the
    reduce-scatters and the embedding's and head's pairs in bf16; the average
    pair over `calls`."""
    gather = collective_time_s("all_gather", act * share, tp, net)
    fp8_pair = collective_time_s("reduce_scatter", act, tp, net) + gather
    one = (in_blocks * fp8_pair + (calls - in_blocks) * ring.one_s) / calls
    nbytes = (in_blocks * (1 + share) / 2 * act + (calls - in_blocks) * act) / calls
    return _Ring(ring.op, ring.group, nbytes, one)


def _fsdp(profile: ModelProfile, net: Interconnect, at: Layout, times: StageTimes) -> list:
    """Per micro-batch: each block gathered twice and its gradients scattered."""
    blocks = stage_blocks(profile, at)
    math_bytes = math_weight_bytes(profile)
    per_block = profile.params_per_block / at.tp
    if profile.blocks:  # experts are split by ep, and by tp only where ETP = TP
        experts = profile.expert_params / profile.blocks
        per_block += experts / (at.ep * at.expert_tp) - experts / at.tp
    block_bytes = per_block * _block_weight_bytes(profile)
    grad_bytes = per_block * profile.reduce_bytes
    root = (profile.params - profile.block_params) / at.tp
    shards, stride = at.shard_ranks, at.model_parallel
    gather = _ring("all_gather", "dp", block_bytes, shards, stride, net)
    scatter = _ring("reduce_scatter", "dp", grad_bytes, shards, stride, net)
    root_gather = _ring("all_gather", "dp", root * math_bytes, shards, stride, net)
    root_scatter = _ring("reduce_scatter", "dp", root * profile.reduce_bytes, shards, stride, net)
    across = at.replicas
    replica = _ring("all_reduce", "dp-replicas", grad_bytes / shards, across, stride * shards, net)
    backward_comm = gather.one_s + scatter.one_s + replica.one_s
    forward_exposed = gather.one_s + (blocks - 1) * max(0.0, gather.one_s - times.block_forward_s)
    backward_exposed = blocks * max(0.0, backward_comm - times.block_backward_s) + scatter.one_s
    out = [
        (gather, 2 * blocks, forward_exposed + root_gather.one_s),
        (scatter, blocks, backward_exposed + root_scatter.one_s),
        (root_gather, 1, 0.0),
        (root_scatter, 1, 0.0),
    ]
    if across > 1:
        out.append((replica, blocks, 0.0))  # its exposure is in the backward's above
    return out


def _block_weight_bytes(profile: ModelProfile) -> float:
    """Bytes per element of a block's weights as data parallelism gathers them:
    the low-precision copy under fp8, MXFP8 and NVFP4 (their fp8/fp4 parameters,
    with the block scales), else the math dtype's."""
    if profile.precision.fp8_linear:
        return profile.precision.linear_format.bytes_per_element
    return math_weight_bytes(profile)


def _held_params(profile: ModelProfile, at: Layout) -> float:
    """The parameters one GPU's stage holds (its tp share, its experts' ep share)."""
    return sum(held_params(profile, at))


def _grad_bytes(profile: ModelProfile, at: Layout) -> float:
    """Gradient bytes one GPU reduces: its stage's share, in the weights' dtype
    without sharding (fp32 under AMP), the reduce dtype under ZeRO."""
    word = profile.reduce_bytes if at.zero else profile.precision.grad_bytes
    return _held_params(profile, at) * word


def _bucketed_exposure(ring: _Ring, backward_s: float) -> float:
    """A bucketed gradient collective overlapped with `backward_s`: what does not
    fit behind it, and at least its last bucket."""
    last = ring.one_s * min(1.0, DDP_BUCKET_BYTES / ring.nbytes) if ring.nbytes else 0.0
    return max(last, ring.one_s - backward_s)


def _per_step(
    profile: ModelProfile, net: Interconnect, at: Layout, times: StageTimes
) -> list[tuple[_Ring, float, float]]:
    """(collective, calls per step, exposed seconds per step) of the data-parallel
    gradients and weights that move once per step."""
    if at.dp == 1 or at.zero >= 3:
        return []
    blocks = stage_blocks(profile, at)
    backward = blocks * times.block_backward_s
    grads = _grad_bytes(profile, at)
    stride = at.model_parallel
    out = []
    if at.zero == 0:
        ring = _ring("all_reduce", "dp", grads, at.dp, stride, net)
        out.append((ring, 1, _bucketed_exposure(ring, backward)))
        return out
    if at.zero == 1:
        ring = _ring("reduce_scatter", "dp", grads, at.dp, stride, net)
        out.append((ring, 1, _bucketed_exposure(ring, backward)))
    root = (profile.params - profile.block_params) / at.tp  # embedding, head: bf16
    blocks_held = _held_params(profile, at) - root
    # the updated weights
    weights = blocks_held * _block_weight_bytes(profile) + root * math_weight_bytes(profile)
    gather = _ring("all_gather", "dp", weights, at.dp, stride, net)
    out.append((gather, 1, gather.one_s))
    return out


def _sends(profile: ModelProfile, net: Interconnect, at: Layout) -> _Ring | None:
    if at.pp == 1:
        return None
    nbytes = profile.boundary_elements * profile.activation_itemsize / (at.cp * at.tp)
    across = at.gpus > net.gpus_per_node
    return _Ring("send", "pp", nbytes, send_time_s(nbytes, net, across))


def collectives(
    profile: ModelProfile, net: Interconnect, at: Layout, times: StageTimes
) -> tuple[list[Collective], float, float]:
    """The step's collectives, the exposed seconds each micro-batch's stage slot
    gains, and the exposed seconds the step gains once."""
    m = at.micro_batches
    v = at.schedule.chunks
    slots = m + (at.pp - 1) / v  # stage slots on the critical path, bubble included
    found: list[Collective] = []
    per_slot = 0.0
    for ring, calls, exposed in _per_micro_batch(profile, net, at, times):
        per_slot += exposed
        found.append(_collective(ring, calls * m, exposed * slots))
    sends = _sends(profile, net, at)
    if sends:
        per_slot += 2 * v * sends.one_s
        crossings = 2 * (m * v + at.pp - 1)
        found.append(_collective(sends, 2 * m * v, crossings * sends.one_s))
    once = 0.0
    for ring, calls, exposed in _per_step(profile, net, at, times):
        once += exposed
        found.append(_collective(ring, calls, exposed))
    return found, per_slot, once


def _collective(ring: _Ring, calls: float, exposed: float) -> Collective:
    """A collective's totals; its exposed time is at most its own: what the
    pipeline's bubble slots add beyond it is the bubble's (`pricing`)."""
    busy = ring.one_s * calls
    return Collective(ring.op, ring.group, ring.nbytes * calls, busy, min(exposed, busy), calls)
