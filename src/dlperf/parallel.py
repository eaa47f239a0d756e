"""Parallelism plans for N GPUs: data parallel (DDP), ZeRO-1/2/3 (ZeRO-3 is
FSDP's full sharding), Megatron tensor parallel, pipeline parallel, and their
combinations.

Every plan is priced from one trace of the model at the micro-batch size:
memory per GPU (states, activations, overhead), compute per GPU, and each
collective by the ring model (all-reduce moves 2(n-1)/n of the bytes through
every GPU's link, all-gather and reduce-scatter (n-1)/n), with what can
overlap with compute. Plans that fit are ranked by predicted throughput.

Conventions and simplifications, stated once:
- Ranks are placed tensor-parallel innermost (within a node), then data
  parallel, then pipeline stages across nodes (Megatron's order).
- Tensor parallelism splits the repeated blocks' weights and compute by t; of
  a transformer block's activations, 24 of Korthikanti et al.'s 34 s b h
  terms (and all of the attention scores) are split, 10 replicated. It costs
  two all-reduces of the block's output in forward and two in backward.
- Pipeline parallelism splits the blocks evenly over p stages; with m
  micro-batches the bubble takes (p - 1) / m of the ideal time, and the
  first stage keeps p micro-batches of activations in flight (1F1B).
- ZeRO follows the paper's mixed-precision accounting, (2 + 2 + K) bytes per
  parameter with K = 12 for Adam (fp32 master weights and two moments):
  stage 1 shards K, stage 2 also the gradients, stage 3 also the weights.
  Plain data parallelism keeps PyTorch AMP's states (see training_memory).
- Gradient all-reduce overlaps with backward (bucketed); ZeRO-3's weight
  all-gathers overlap with forward and backward (prefetch). What does not fit
  in the compute time is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .errors import DlperfError
from .hardware import HardwareSpec
from .training_memory import optimizer_bytes, overhead_bytes, state_bytes_per_param

# Latency of one step of a ring collective (NCCL, per hop), in seconds.
RING_STEP_LATENCY_S = 5e-6
# Inter-node network per node when not given: 8 x 200 Gb/s InfiniBand.
DEFAULT_NODE_NETWORK_BYTES_PER_S = 8 * 200e9 / 8
# Share of a transformer block's activations that tensor parallelism splits.
TP_SPLIT_SHARE = 24 / 34
# Share of the backward time the bucketed gradient all-reduce can hide behind.
OVERLAP_SHARE = 0.9


@dataclass(frozen=True)
class Interconnect:
    intra_node_bytes_per_s: float  # per GPU, one direction
    inter_node_bytes_per_s: float  # per GPU, one direction
    latency_s: float = RING_STEP_LATENCY_S
    gpus_per_node: int = 8


def interconnect_for(
    spec: HardwareSpec, gpus_per_node: int, node_network_bytes_per_s: float | None = None
) -> Interconnect:
    intra = spec.nvlink_bandwidth_bytes_per_s or spec.pcie_bandwidth_bytes_per_s or 16e9
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
    precision: str
    optimizer: str
    param_shapes: list = field(default_factory=list, repr=False)


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
    collectives: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.zero:
            parts.append(f"zero{self.zero}")
        return "-".join(parts)

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["name"] = self.name
        return out


def zero_state_bytes(profile: ModelProfile, zero: int, dp: int, params: float) -> float:
    """Weights + gradients + optimizer states per GPU, for `params` per model shard."""
    if zero == 0:
        w, g = state_bytes_per_param(profile.precision)
        shapes_share = params / max(profile.params, 1)
        states = optimizer_bytes(profile.optimizer, profile.params, profile.param_shapes)
        return (w + g) * params + states * shapes_share
    mixed = profile.precision.startswith("amp") or profile.precision in ("fp16", "bf16")
    weight = grad = 2 if mixed else 4
    per_param_states = optimizer_bytes(
        profile.optimizer, profile.params, profile.param_shapes
    ) / max(profile.params, 1)
    k = (4 if mixed else 0) + per_param_states  # fp32 master weights + optimizer states
    weights = weight * (params / dp if zero >= 3 else params)
    grads = grad * (params / dp if zero >= 2 else params)
    return weights + grads + k * params / dp


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
    mb = profile.micro_batch
    per_rank = global_batch // dp
    if per_rank * dp != global_batch or per_rank % mb:
        return None
    m = per_rank // mb  # micro-batches per step on each pipeline
    if pp > max(profile.blocks, 1) or (tp > 1 and profile.blocks == 0):
        return None
    blocks_per_stage = profile.blocks / pp
    # -- memory ------------------------------------------------------------
    shard_params = profile.block_params / (tp * pp) + (profile.params - profile.block_params)
    states = zero_state_bytes(profile, zero, dp, shard_params)
    split = TP_SPLIT_SHARE if tp > 1 else 1.0
    block_act = profile.block_activations_bytes * (split / tp + (1 - split))
    in_flight = min(m, pp)
    acts = in_flight * blocks_per_stage * block_act + profile.other_activations_bytes
    gathered = 0.0
    if zero >= 3:  # two blocks' full weights are gathered at a time (prefetch)
        per_block = profile.block_params / max(profile.blocks, 1) / tp
        gathered = 2 * per_block * 2
    memory = states + acts + gathered + profile.transient_bytes / tp + overhead_bytes(spec, acts)
    # -- compute -------------------------------------------------------------
    block_f, block_b = profile.block_forward_s / tp, profile.block_backward_s / tp
    stage_f = blocks_per_stage * block_f + profile.other_forward_s / pp
    stage_b = blocks_per_stage * block_b + profile.other_backward_s / pp
    ideal = m * (stage_f + stage_b)
    bubble = (pp - 1) * (stage_f + stage_b)
    optimizer = profile.optimizer_s / (tp * pp) / (dp if zero >= 1 else 1)
    compute = ideal + bubble + optimizer
    # -- communication ---------------------------------------------------------
    collectives = {}
    tp_bw = net.intra_node_bytes_per_s if tp <= net.gpus_per_node else net.inter_node_bytes_per_s
    if tp > 1:
        one = ring_time_s("all_reduce", profile.block_output_bytes, tp, tp_bw, net.latency_s)
        count = 4 * profile.blocks / pp * m
        collectives["tp all_reduce"] = {
            "bytes": count * profile.block_output_bytes,
            "time_s": count * one,
        }
    if pp > 1:
        hop_bw = net.inter_node_bytes_per_s if tp * dp * pp > net.gpus_per_node else tp_bw
        sends = 2 * (pp - 1) * m
        collectives["pp send/recv"] = {
            "bytes": sends * profile.block_output_bytes / tp,
            "time_s": sends * profile.block_output_bytes / tp / hop_bw,
        }
    exposed = sum(c["time_s"] for c in collectives.values())
    if dp > 1:
        dp_bw = (
            net.intra_node_bytes_per_s
            if tp * dp <= net.gpus_per_node and pp == 1
            else net.inter_node_bytes_per_s
        )
        mixed = profile.precision != "fp32" and profile.precision != "tf32"
        grad_bytes = shard_params * (
            2 if zero and mixed else state_bytes_per_param(profile.precision)[1]
        )
        if zero == 0:
            t = ring_time_s("all_reduce", grad_bytes, dp, dp_bw, net.latency_s)
            collectives["dp all_reduce"] = {"bytes": grad_bytes, "time_s": t}
            hidden = OVERLAP_SHARE * m * stage_b
        else:
            weight_bytes = shard_params * (2 if mixed else 4)
            t = ring_time_s("reduce_scatter", grad_bytes, dp, dp_bw, net.latency_s)
            gather = ring_time_s("all_gather", weight_bytes, dp, dp_bw, net.latency_s)
            collectives["dp reduce_scatter"] = {"bytes": grad_bytes, "time_s": t}
            collectives["dp all_gather"] = {
                "bytes": weight_bytes,
                "time_s": gather * (2 if zero >= 3 else 1),
            }
            t += gather * (2 if zero >= 3 else 1)
            hidden = OVERLAP_SHARE * m * (stage_b + (stage_f if zero >= 3 else 0))
        exposed += max(0.0, t - hidden)
    comm = sum(c["time_s"] for c in collectives.values())
    step = compute + exposed
    tokens = global_batch * profile.tokens_per_sample / step if profile.tokens_per_sample else None
    return Plan(
        dp=dp,
        tp=tp,
        pp=pp,
        zero=zero,
        micro_batch=mb,
        accumulate=m,
        memory_per_gpu_bytes=memory,
        comm_time_s=comm,
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


# -- one run's plans ---------------------------------------------------------------


def profile(run, session, micro_batch: int) -> ModelProfile:
    """One traced step of `run` at the micro-batch size, summarised for the planner."""
    from .run import first_tensor
    from .tracing import within
    from .training_memory import resize_inputs, transient_bytes

    step = run.with_inputs(resize_inputs(run.inputs, batch=micro_batch))
    recorded = session.trace(step)
    timing = session.analysis(step)
    blocks = recorded.blocks

    def in_block(path: str) -> bool:
        return any(within(path, b) for b in blocks)

    block_time = {"forward": 0.0, "backward": 0.0}
    other_time = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for row in timing.rows:
        target = block_time if in_block(row.module) and row.phase in block_time else other_time
        target[row.phase] += row.time_s
    block_acts = sum(
        t.nbytes for t in recorded.saved if t.kind == "activation" and in_block(t.module)
    )
    sizes = dict(run.module.named_modules())
    block_params = sum(sum(p.numel() for p in sizes[b].parameters()) for b in blocks)
    n = max(len(blocks), 1)
    tokens = int(first_tensor(step.inputs).shape[1]) if step.token_inputs else 0
    return ModelProfile(
        name=run.name,
        params=recorded.params,
        block_params=block_params,
        blocks=len(blocks),
        block_activations_bytes=block_acts / n,
        other_activations_bytes=recorded.activation_bytes - block_acts,
        block_output_bytes=max((recorded.module_inputs.get(b, 0) for b in blocks), default=0),
        block_forward_s=block_time["forward"] / n,
        block_backward_s=block_time["backward"] / n,
        other_forward_s=other_time["forward"],
        other_backward_s=other_time["backward"],
        optimizer_s=other_time["optimizer"],
        transient_bytes=transient_bytes(recorded),
        micro_batch=micro_batch,
        tokens_per_sample=tokens,
        precision=run.precision.name,
        optimizer=run.optimizer,
        param_shapes=recorded.param_shapes,
    )


@dataclass
class PlanReport:
    model: str
    gpu: str
    gpus: int
    gpus_per_node: int
    global_batch: int
    micro_batch: int
    precision: str
    params: int
    plans: list[Plan]

    @property
    def best(self) -> Plan:
        return self.plans[0]

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "plans"}
        out["plans"] = [p.to_dict() for p in self.plans]
        return out


def plan_report(
    run,
    session,
    gpus: int,
    gpus_per_node: int,
    global_batch: int | None,
    micro_batch: int,
    node_network_bytes_per_s: float | None = None,
    measured_interconnect: dict | None = None,
) -> PlanReport:
    """Every plan of `run` on `gpus` GPUs, priced and ranked (see `dlperf.plan`)."""
    batch = global_batch or 4 * gpus * micro_batch
    model = profile(run, session, micro_batch)
    net = interconnect_for(run.spec, min(gpus_per_node, gpus), node_network_bytes_per_s)
    if measured_interconnect:  # measured by `dlperf measure-comm`: one link for all groups
        bandwidth = measured_interconnect["bandwidth_bytes_per_s"]
        net = replace(
            net,
            intra_node_bytes_per_s=bandwidth,
            inter_node_bytes_per_s=bandwidth,
            latency_s=measured_interconnect.get("latency_s", net.latency_s),
        )
    ranked = plans(model, run.spec, net, gpus, batch)
    if not ranked:
        raise DlperfError(
            f"no plan divides global batch {batch} into micro-batches of {micro_batch} over "
            f"{gpus} GPUs; pick --global-batch as a multiple of gpus x micro-batch"
        )
    return PlanReport(
        model=run.name,
        gpu=run.spec.id,
        gpus=gpus,
        gpus_per_node=net.gpus_per_node,
        global_batch=batch,
        micro_batch=micro_batch,
        precision=run.precision.name,
        params=model.params,
        plans=ranked,
    )
