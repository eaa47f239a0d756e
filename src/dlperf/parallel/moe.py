"""What a mixture-of-experts model's trace says about its experts: the facts
a plan needs to split the experts over GPUs (expert parallelism) and to
price the all-to-all that sends each token to its experts and back.

They are read from the trace's `dlperf::moe` events (one per MoE layer call
and phase, `tracing.moe`): each carries the layer's tokens, hidden size,
experts, top-k, each expert's FFN size and the expert weights themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tracing import Trace
from ..tracing.moe import MOE_OP, moe_shape


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
