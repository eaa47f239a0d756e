"""One run's plans (`dlperf plan`): the model profiled from one traced step
at the micro-batch size (one analysis per checkpointing policy searched),
every layout the fixed dimensions leave open priced, and the plans ranked:
only those that fit, fastest first; then, nearest to fitting first, those
that do not, each with what would make it fit. Each layout (dp, tp, pp, cp,
ep, sharding) is shown once, with its best schedule, sequence parallelism
and checkpointing.

Under a mixed-precision policy (amp-bf16, amp-fp16, fp8), sharded layouts
are priced from a second trace in the compute dtype: FSDP's mixed precision
(FSDP2's `param_dtype`, FSDP1's `MixedPrecision`) casts the gathered
parameters to it and runs without autocast, and so do the ZeRO-1/2 runs
(Megatron-LM's distributed optimizer wraps the model in its Float16Module,
bf16 or fp16 parameters and inputs; DeepSpeed's bf16/fp16 engine casts the
module to half precision): the fp32 masters live in the optimizer, as
`memory.zero_state_bytes` counts them. The residual stream and the
activations are then bf16 with no fp32 casts beside each linear layer. fp8
keeps its fp8 linear GEMMs on the bf16 model (`precision.compute_policy`:
Transformer Engine's and torchao's casts read the bf16 weights). The states
stay those of the policy (fp32 sharded masters) and so does the optimizer
step."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace

from ..errors import DlperfError
from ..hardware.framework import framework_host
from ..jsonable import fields_dict, jsonable
from ..precision import compute_policy
from ..run import Run, Session
from ..run_config import experts_graphed
from ..training_memory import parse_checkpoint
from .fitting import remedies
from .network import interconnect_for
from .pricing import Plan, price, ranked
from .profile import ModelProfile, profile
from .search import fixed_dimensions, layouts

SEARCHED_CHECKPOINTS = ("none", "selective", "full")
# Plans that do not fit shown with their remedies (the nearest ones).
REMEDIED_PLANS = 12


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
    memory_bytes: float = 0.0  # one GPU's capacity
    searched: int = 0  # plans priced (every schedule, SP and checkpointing variant)
    note: str | None = None  # one line when no plan fits
    fixed: dict = field(default_factory=dict)
    # GPUs whose collectives run on NVLink (0: the node's; GB200 NVL72's 72 span nodes)
    nvlink_domain: int = 0

    @property
    def best(self) -> Plan:
        return self.plans[0]

    @property
    def fitting(self) -> int:
        return sum(p.fits for p in self.plans)

    def to_dict(self) -> dict:
        out = fields_dict(self, skip=("plans",))
        return out | {"fitting": self.fitting, "plans": jsonable(self.plans)}


def _sharded_profiles(run, session, micro_batch: int, profiles: list[ModelProfile]) -> dict:
    """Per checkpointing policy, the profile sharded layouts (ZeRO-1, 2 and
    FSDP) are priced with: the same as the others unless the policy is mixed
    precision, then traced in the compute dtype (module docstring), with the
    policy's states and optimizer step."""
    policy = run.precision
    if not policy.is_mixed:
        return {}
    compute = compute_policy(run.spec, policy, run.training)
    out = {}
    for p in profiles:
        pure = dataclasses.replace(run, precision=compute, checkpoint=p.checkpoint)
        found = profile(pure, session, micro_batch)
        out[p.checkpoint] = replace(found, precision=policy, optimizer_s=p.optimizer_s)
    return out


def _policies(checkpoint: str | None, model: ModelProfile) -> list[str]:
    if checkpoint is not None:
        parse_checkpoint(checkpoint)
        return [checkpoint]
    if not model.blocks:
        return ["none"]
    return [p for p in SEARCHED_CHECKPOINTS if p != "selective" or model.block_core_bytes]


def _best_per_layout(plans: list[Plan]) -> list[Plan]:
    """One plan per (dp, tp, pp, cp, ep, sharding): the first in rank order."""
    seen, kept = set(), []
    for p in plans:
        key = (p.dp, p.tp, p.pp, p.cp, p.ep, p.sharding)
        if key not in seen:
            seen.add(key)
            kept.append(p)
    return kept


def _network(run, gpus, gpus_per_node, node_network_bytes_per_s, measured):
    net = interconnect_for(run.spec, min(gpus_per_node, gpus), node_network_bytes_per_s, gpus)
    if measured:  # measured by `dlperf measure-comm`: one link for all groups
        bandwidth = measured["bandwidth_bytes_per_s"]
        net = replace(
            net,
            intra_node_bytes_per_s=bandwidth,
            inter_node_bytes_per_s=bandwidth,
            node_network_bytes_per_s=bandwidth * net.gpus_per_node,
            ring_bus_cap_bytes_per_s=None,
            latency_s=measured.get("latency_s", net.latency_s),
            intra_link=None,  # measured: the plain ring model with the measured latency
        )
    return net


def _no_fit_note(shown: list[Plan], capacity: float, gpu: str, forced: bool) -> str:
    nearest = shown[0]
    need = nearest.memory_per_gpu_bytes
    over = (need - capacity) / 2**30
    head = f"{nearest.name} does not fit" if forced else "no plan fits"
    return (
        f"{head}: the nearest needs {need / 2**30:.1f} GiB per GPU, {over:.1f} GiB more than "
        f"the {capacity / 2**30:.1f} GiB of the {gpu}"
    )


def _check_offload(run: Run, par, checkpoint: str | None) -> int:
    """Blocks to offload (`--offload-layers`), refused in one line where
    Megatron-Core refuses it: with pipelining, recompute or CUDA graphs."""
    offload = par.offload_layers or 0
    if not offload:
        return 0
    if par.pp not in (None, 1):
        raise DlperfError(f"--offload-layers with --pp {par.pp}: Megatron-Core offloads "
                          "activations only without pipelining; give --pp 1")  # fmt: skip
    if checkpoint not in (None, "none"):
        raise DlperfError(f"--offload-layers with --checkpoint {checkpoint}: Megatron-Core "
                          "offloads or recomputes, not both; drop one")  # fmt: skip
    if run.cuda_graphs:
        raise DlperfError("--offload-layers with --cuda-graphs: Megatron-Core captures no "
                          "offloading step in a graph; drop one")  # fmt: skip
    if not run.spec.pcie_bandwidth_bytes_per_s:
        raise DlperfError(f"the {run.spec.id} spec gives no host link bandwidth "
                          "(pcie_bandwidth_bytes_per_s) to offload over")  # fmt: skip
    return offload


def _check_offloaded_blocks(offload: int, first: ModelProfile) -> None:
    if offload and offload >= first.blocks:
        raise DlperfError(
            f"--offload-layers {offload}: Megatron-Core offloads fewer blocks than the model's "
            f"{first.blocks}; give at most {first.blocks - 1}"
        )


def plan_report(run: Run, session: Session, micro_batch: int) -> PlanReport:
    """Every plan of `run` (its `config.parallel`: GPUs, batch, network, the
    dimensions given) priced and ranked (see `dlperf.plan`); a checkpoint
    policy not given searches none, selective and full."""
    par, checkpoint = run.config.parallel, run.config.step.checkpoint
    gpus, gpus_per_node, global_batch = par.gpus, par.gpus_per_node, par.global_batch
    fixed = fixed_dimensions(par)
    offload = _check_offload(run, par, checkpoint)
    batch = global_batch or 4 * gpus * micro_batch
    first = profile(dataclasses.replace(run, checkpoint=checkpoint or "none"), session, micro_batch)
    _check_offloaded_blocks(offload, first)
    for flag, given in (("--overlap-ep-comm", par.overlap_ep_comm),
                        ("--moe-dispatcher", par.moe_dispatcher)):  # fmt: skip
        if given and (not first.moe_layers or par.ep == 1):
            why = "--ep 1 has no all-to-all" if first.moe_layers else f"{first.name} has no experts"
            raise DlperfError(f"{flag} is about expert parallelism's all-to-alls, and {why}: "
                              "drop it")  # fmt: skip
    profiles = [
        first if policy == first.checkpoint else
        profile(dataclasses.replace(run, checkpoint=policy), session, micro_batch)
        for policy in (["none"] if offload else _policies(checkpoint, first))
    ]  # fmt: skip
    host = run.spec.pcie_bandwidth_bytes_per_s or 0.0
    on_host = (run.kernels == "te" and first.moe_layers
               and not experts_graphed(run.cuda_graphs, par.cuda_graph_scope))  # fmt: skip
    gemm_host = framework_host(run.spec.architecture).te_expert_gemm_host_s if on_host else 0.0
    how = {"offload_layers": offload, "host_bytes_per_s": host, "expert_gemm_host_s": gemm_host,
           "ep_comm_overlap": bool(par.overlap_ep_comm),
           "ep_once_per_node": par.moe_dispatcher == "flex"}  # fmt: skip
    profiles = [replace(p, **how) for p in profiles]
    net = _network(run, gpus, gpus_per_node, par.node_network_bytes_per_s,
                   par.measured_interconnect)  # fmt: skip
    found = layouts(first, gpus, net.gpus_per_node, batch, par, first.tokens_per_sample)
    if offload:  # Megatron-Core offloads no pipelined run
        found = [at for at in found if at.pp == 1]
        if not found:
            raise DlperfError(f"no layout of {gpus} GPUs with pp 1 runs this batch: "
                              "--offload-layers needs pp 1")  # fmt: skip
    sharded = (
        _sharded_profiles(run, session, micro_batch, profiles)
        if any(at.zero for at in found)
        else {}
    )
    sharded = {k: replace(v, **how) for k, v in sharded.items()}

    def priced_with(p: ModelProfile, at) -> ModelProfile:
        return sharded.get(p.checkpoint, p) if at.zero else p

    priced = [price(priced_with(p, at), run.spec, net, at) for p in profiles for at in found]
    shown = _best_per_layout(ranked(priced))
    note = None
    if not shown[0].fits:
        by_policy = {p.checkpoint: p for p in profiles}
        for plan in shown[:REMEDIED_PLANS]:
            used = priced_with(by_policy[plan.checkpoint], plan.layout)
            plan.to_fit = remedies(used, run.spec, plan.layout)
        forced = len(fixed) >= 4 or len(shown) == 1
        note = _no_fit_note(shown, run.spec.memory_bytes, run.spec.id, forced)
    return PlanReport(
        model=run.name,
        gpu=run.spec.id,
        gpus=gpus,
        gpus_per_node=min(gpus_per_node, gpus),
        nvlink_domain=net.gpus_per_node,
        global_batch=batch,
        micro_batch=micro_batch,
        precision=run.precision.name,
        params=first.params,
        plans=shown,
        memory_bytes=float(run.spec.memory_bytes),
        searched=len(priced),
        note=note,
        fixed={**fixed, **({"checkpoint": checkpoint} if checkpoint else {}),
               **({"offload_layers": offload} if offload else {})},  # fmt: skip
    )
