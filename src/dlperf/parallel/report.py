"""One run's plans (`dlperf plan`): the model profiled from one traced step
at the micro-batch size, every plan priced, fitting ones first."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import DlperfError
from ..models.inputs import resize_inputs
from ..run import first_tensor
from ..tracing import within
from ..training_memory import transient_bytes
from .network import interconnect_for
from .pricing import ModelProfile, Plan, plans


def _phase_times(rows, in_block) -> tuple[dict[str, float], dict[str, float]]:
    """Predicted time per phase inside the repeated blocks, and outside them."""
    block_time = {"forward": 0.0, "backward": 0.0}
    other_time = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for row in rows:
        target = block_time if in_block(row.module) and row.phase in block_time else other_time
        target[row.phase] += row.time_s
    return block_time, other_time


def profile(run, session, micro_batch: int) -> ModelProfile:
    """One traced step of `run` at the micro-batch size, summarised for the planner."""
    step = run.with_inputs(resize_inputs(run.inputs, batch=micro_batch))
    recorded = session.trace(step)
    blocks = recorded.blocks

    def in_block(path: str) -> bool:
        return any(within(path, b) for b in blocks)

    block_time, other_time = _phase_times(session.analysis(step).rows, in_block)
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
        precision=run.precision,
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
