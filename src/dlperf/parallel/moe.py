"""What a mixture-of-experts model's trace says about its experts: the facts
a plan needs to split the experts over GPUs (expert parallelism) and to
price the all-to-all that sends each token to its experts and back.

They are read from the trace's `dlperf::moe` events (one per MoE layer call
and phase, `tracing.moe`): each carries the layer's tokens, hidden size,
experts, top-k, each expert's FFN size and the expert weights themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import dtype_of
from ..hardware import HardwareSpec
from ..kernels.pricing import GemmTimer, time
from ..ops.cost import CostContext
from ..ops.moe import expert_parallel_costed
from ..tracing import Trace
from ..tracing.moe import MOE_BACKWARD_OP, MOE_OP, moe_shape


@dataclass(frozen=True)
class MoeFacts:
    """The MoE layers of one traced step. A model whose MoE layers differ
    reports its first layer's sizes; `expert_params` is every layer's."""

    moe_layers: int  # MoE layer calls in one forward pass
    experts: int  # experts per layer (E)
    top_k: int  # experts each token is sent to (k)
    expert_params: int  # parameters inside the experts, all MoE layers together
    tokens: int  # tokens routed by one MoE layer call (T: batch x sequence)
    hidden: int  # hidden size (H): elements of one token's activation
    ffn: int  # each expert's FFN size (F)
    gated: bool  # SwiGLU experts: gate, up and down matrices (3 H F each)
    activation_bytes: int  # bytes per element of the tokens sent to the experts

    @property
    def dispatch_bytes(self) -> int:
        """Bytes one MoE layer call sends to its experts: T x k token copies of
        H elements (the combine returns as many; backward moves both again).
        An all-to-all over `ep` ranks keeps 1/ep of them local."""
        return self.tokens * self.top_k * self.hidden * self.activation_bytes


def moe_facts(trace: Trace) -> MoeFacts | None:
    """The trace's MoE facts, or None for a model without MoE layers."""
    calls = [e for e in trace.events if e.op == MOE_OP and e.phase == "forward"]
    if not calls:
        return None
    first = moe_shape(calls[0])
    # a layer called twice (shared weights) holds its experts once
    params_by_layer = {e.module: moe_shape(e).expert_params for e in calls}
    return MoeFacts(
        moe_layers=len(calls),
        experts=first.experts,
        top_k=first.top_k,
        expert_params=sum(params_by_layer.values()),
        tokens=first.tokens,
        hidden=first.hidden,
        ffn=first.ffn,
        gated=first.gated,
        activation_bytes=first.dtype.itemsize,
    )


def expert_parallel_scales(trace: Trace, spec: HardwareSpec) -> dict[int, tuple[float, float]]:
    """Per expert-parallel size ep (each divisor of the experts), the time of
    the trace's MoE layer calls on one GPU of the group over their time as
    traced, forward and backward (`ops.moe.expert_parallel_costed`): the same
    rows over E / ep experts. Experts traced with few rows each stream their
    weights (memory-bound grouped GEMMs); split over ep GPUs, each expert gets
    ep times the rows and 1/ep of the weights are read, so the GEMMs turn
    math-bound. Empty for a dense model."""
    calls = [e for e in trace.events if e.op in (MOE_OP, MOE_BACKWARD_OP)]
    if not calls:
        return {}
    ctx, timer = CostContext(trace.precision), GemmTimer(spec)
    experts = moe_shape(calls[0]).experts
    # one price per distinct call: every layer of a model is usually the same
    distinct: dict[tuple, list] = {}
    for e in calls:
        key = (e.op, *(tuple(getattr(a, "shape", ())) for a in e.args[:3]), moe_shape(e))
        distinct.setdefault(key, [e, 0])[1] += 1

    def seconds(ep: int) -> tuple[float, float]:
        out = [0.0, 0.0]
        for e, count in distinct.values():
            cost = expert_parallel_costed(e, ctx, ep).cost
            priced = time(cost, spec, dtype_of([], e, cost), timer, op=e.op).seconds
            out[e.op == MOE_BACKWARD_OP] += count * priced
        return out[0], out[1]

    traced = seconds(1)
    scales = {}
    for ep in (d for d in range(1, experts + 1) if experts % d == 0):
        at = traced if ep == 1 else seconds(ep)
        scales[ep] = tuple(a / t if t else 1.0 for a, t in zip(at, traced, strict=True))
    return scales
