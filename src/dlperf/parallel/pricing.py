"""Pricing one plan (dp, tp, pp, ZeRO stage) from a profile of the model:
memory per GPU, compute, and each collective with what overlaps with compute.
The conventions are stated once, in the package docstring."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..hardware import HardwareSpec
from ..precision import Precision
from ..precision import precision as resolve_precision
from ..training_memory import optimizer_bytes, overhead_bytes, state_bytes_per_param
from .network import Interconnect, ring_time_s

# Share of a transformer block's activations that tensor parallelism splits.
TP_SPLIT_SHARE = 24 / 34
# Share of the backward time the bucketed gradient all-reduce can hide behind.
OVERLAP_SHARE = 0.9
# ZeRO keeps fp32 master weights beside 16-bit ones (the paper's K includes them).
ZERO_MASTER_BYTES = 4
# ZeRO-3 prefetch: two blocks' weights are gathered at a time, 16-bit (2 B) each.
ZERO3_GATHERED_BLOCKS = 2
ZERO3_GATHERED_BYTES = 2


@dataclass
class ModelProfile:
    """What the planner needs from one traced step at `micro_batch`."""

    name: str
    params: int
    block_params: int
    blocks: int
    block_activations_bytes: float  # per block, per micro-batch
    other_activations_bytes: float
    block_output_bytes: float  # one block's output (the TP all-reduce size)
    block_forward_s: float
    block_backward_s: float
    other_forward_s: float
    other_backward_s: float
    optimizer_s: float
    transient_bytes: float
    micro_batch: int
    tokens_per_sample: int
    precision: Precision  # a policy name is resolved to its Precision
    optimizer: str
    param_shapes: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.precision = resolve_precision(self.precision)


@dataclass(frozen=True)
class Collective:
    """One kind of collective in a step: the bytes it moves and its time."""

    bytes: float
    time_s: float

    def __getitem__(self, key: str):
        """Read as the dict it used to be (`c["bytes"]`), for older readers."""
        return getattr(self, key)


@dataclass
class Plan:
    dp: int
    tp: int
    pp: int
    zero: int
    micro_batch: int
    accumulate: int
    memory_per_gpu_bytes: float
    comm_time_s: float
    exposed_comm_s: float
    compute_time_s: float
    step_time_s: float
    samples_per_s: float
    tokens_per_s: float | None
    fits: bool
    collectives: dict[str, Collective] = field(default_factory=dict)

    @property
    def name(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.zero:
            parts.append(f"zero{self.zero}")
        return "-".join(parts)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["name"] = self.name
        return out


@dataclass(frozen=True)
class _Layout:
    """How a plan lays the step over its GPUs, and m micro-batches per step."""

    dp: int
    tp: int
    pp: int
    zero: int
    m: int


def math_weight_bytes(policy: Precision) -> int:
    """Bytes per element of the weights the math reads: autocast's copy, else
    the weights themselves (2 under mixed or half precision, 4 under fp32)."""
    return policy.cast_weight_bytes or policy.master_weight_bytes


def zero_state_bytes(profile: ModelProfile, zero: int, dp: int, params: float) -> float:
    """Weights + gradients + optimizer states per GPU, for `params` per model shard."""
    if zero == 0:
        w, g = state_bytes_per_param(profile.precision)
        shapes_share = params / max(profile.params, 1)
        states = optimizer_bytes(profile.optimizer, profile.params, profile.param_shapes)
        return (w + g) * params + states * shapes_share
    weight = grad = math_weight_bytes(profile.precision)
    per_param_states = optimizer_bytes(
        profile.optimizer, profile.params, profile.param_shapes
    ) / max(profile.params, 1)
    masters = ZERO_MASTER_BYTES if weight < ZERO_MASTER_BYTES else 0
    k = masters + per_param_states  # fp32 master weights + optimizer states
    weights = weight * (params / dp if zero >= 3 else params)
    grads = grad * (params / dp if zero >= 2 else params)
    return weights + grads + k * params / dp


def _shard_params(profile: ModelProfile, at: _Layout) -> float:
    """Parameters per GPU before ZeRO: the blocks split by tp and pp, the rest whole."""
    return profile.block_params / (at.tp * at.pp) + (profile.params - profile.block_params)


def _memory_per_gpu(profile: ModelProfile, spec: HardwareSpec, at: _Layout) -> float:
    blocks_per_stage = profile.blocks / at.pp
    states = zero_state_bytes(profile, at.zero, at.dp, _shard_params(profile, at))
    split = TP_SPLIT_SHARE if at.tp > 1 else 1.0
    block_act = profile.block_activations_bytes * (split / at.tp + (1 - split))
    in_flight = min(at.m, at.pp)  # 1F1B: the first stage holds pp micro-batches
    acts = in_flight * blocks_per_stage * block_act + profile.other_activations_bytes
    gathered = 0.0
    if at.zero >= 3:
        per_block = profile.block_params / max(profile.blocks, 1) / at.tp
        gathered = ZERO3_GATHERED_BLOCKS * per_block * ZERO3_GATHERED_BYTES
    transient = profile.transient_bytes / at.tp
    return states + acts + gathered + transient + overhead_bytes(spec, acts)


def _stage_times(profile: ModelProfile, at: _Layout) -> tuple[float, float]:
    """Forward and backward time of one pipeline stage for one micro-batch."""
    blocks_per_stage = profile.blocks / at.pp
    block_f, block_b = profile.block_forward_s / at.tp, profile.block_backward_s / at.tp
    stage_f = blocks_per_stage * block_f + profile.other_forward_s / at.pp
    stage_b = blocks_per_stage * block_b + profile.other_backward_s / at.pp
    return stage_f, stage_b


def _compute_s(profile: ModelProfile, at: _Layout, stage_f: float, stage_b: float) -> float:
    """m micro-batches, the pipeline bubble, and the (ZeRO-sharded) optimizer step."""
    ideal = at.m * (stage_f + stage_b)
    bubble = (at.pp - 1) * (stage_f + stage_b)
    optimizer = profile.optimizer_s / (at.tp * at.pp) / (at.dp if at.zero >= 1 else 1)
    return ideal + bubble + optimizer


def _model_parallel(profile: ModelProfile, net: Interconnect, at: _Layout) -> dict:
    """TP's all-reduces of each block's output and PP's activation sends."""
    collectives = {}
    tp_link = (
        net.intra_node_bytes_per_s if at.tp <= net.gpus_per_node else net.inter_node_bytes_per_s
    )
    if at.tp > 1:
        one = ring_time_s("all_reduce", profile.block_output_bytes, at.tp, tp_link, net.latency_s)
        count = 4 * profile.blocks / at.pp * at.m  # two in forward, two in backward
        collectives["tp all_reduce"] = Collective(count * profile.block_output_bytes, count * one)
    if at.pp > 1:
        across = at.tp * at.dp * at.pp > net.gpus_per_node
        hop_link = net.inter_node_bytes_per_s if across else tp_link
        sends = 2 * (at.pp - 1) * at.m
        collectives["pp send/recv"] = Collective(
            sends * profile.block_output_bytes / at.tp,
            sends * profile.block_output_bytes / at.tp / hop_link,
        )
    return collectives


def _data_parallel(
    profile: ModelProfile, net: Interconnect, at: _Layout, stage_f: float, stage_b: float
) -> tuple[dict, float]:
    """DP's gradient collectives (and ZeRO's weight gathers), and the compute time
    they can hide behind: backward (and forward under ZeRO-3's prefetch)."""
    within_node = at.tp * at.dp <= net.gpus_per_node and at.pp == 1
    link = net.intra_node_bytes_per_s if within_node else net.inter_node_bytes_per_s
    shard = _shard_params(profile, at)
    half = math_weight_bytes(profile.precision)
    grad_bytes = shard * (half if at.zero else profile.precision.grad_bytes)
    if at.zero == 0:
        reduce = ring_time_s("all_reduce", grad_bytes, at.dp, link, net.latency_s)
        return {"dp all_reduce": Collective(grad_bytes, reduce)}, OVERLAP_SHARE * at.m * stage_b
    weight_bytes = shard * half
    gathers = 2 if at.zero >= 3 else 1  # ZeRO-3 gathers for forward and again for backward
    scatter = ring_time_s("reduce_scatter", grad_bytes, at.dp, link, net.latency_s)
    gather = ring_time_s("all_gather", weight_bytes, at.dp, link, net.latency_s)
    collectives = {
        "dp reduce_scatter": Collective(grad_bytes, scatter),
        "dp all_gather": Collective(weight_bytes, gather * gathers),
    }
    hidden = OVERLAP_SHARE * at.m * (stage_b + (stage_f if at.zero >= 3 else 0))
    return collectives, hidden


def _layout(profile: ModelProfile, dp, tp, pp, zero, global_batch) -> _Layout | None:
    """The layout, or None where the batch or the blocks do not divide."""
    per_rank = global_batch // dp
    if per_rank * dp != global_batch or per_rank % profile.micro_batch:
        return None
    if pp > max(profile.blocks, 1) or (tp > 1 and profile.blocks == 0):
        return None
    return _Layout(dp, tp, pp, zero, per_rank // profile.micro_batch)


def price(
    profile: ModelProfile,
    spec: HardwareSpec,
    net: Interconnect,
    dp: int,
    tp: int,
    pp: int,
    zero: int,
    global_batch: int,
) -> Plan | None:
    """One plan priced, or None where it cannot split this batch or model."""
    at = _layout(profile, dp, tp, pp, zero, global_batch)
    if at is None:
        return None
    memory = _memory_per_gpu(profile, spec, at)
    stage_f, stage_b = _stage_times(profile, at)
    compute = _compute_s(profile, at, stage_f, stage_b)
    collectives = _model_parallel(profile, net, at)
    exposed = sum(c.time_s for c in collectives.values())
    if dp > 1:
        data, hidden = _data_parallel(profile, net, at, stage_f, stage_b)
        collectives.update(data)
        exposed += max(0.0, sum(c.time_s for c in data.values()) - hidden)
    step = compute + exposed
    tokens = global_batch * profile.tokens_per_sample / step if profile.tokens_per_sample else None
    return Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        zero=zero,
        micro_batch=profile.micro_batch,
        accumulate=at.m,
        memory_per_gpu_bytes=memory,
        comm_time_s=sum(c.time_s for c in collectives.values()),
        exposed_comm_s=exposed,
        compute_time_s=compute,
        step_time_s=step,
        samples_per_s=global_batch / step,
        tokens_per_s=tokens,
        fits=memory <= spec.memory_bytes,
        collectives=collectives,
    )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plans(
    profile: ModelProfile, spec: HardwareSpec, net: Interconnect, gpus: int, global_batch: int
) -> list[Plan]:
    """Every (dp, tp, pp, zero) for `gpus` GPUs, fitting ones first, fastest first."""
    found = []
    for tp in divisors(gpus):
        if tp > net.gpus_per_node:
            continue
        for pp in divisors(gpus // tp):
            dp = gpus // (tp * pp)
            for zero in (0, 1, 2, 3) if dp > 1 else (0,):
                plan = price(profile, spec, net, dp, tp, pp, zero, global_batch)
                if plan:
                    found.append(plan)
    return sorted(found, key=lambda p: (not p.fits, p.step_time_s))
