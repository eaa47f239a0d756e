"""Expert parallelism's all-to-alls behind another micro-batch's compute, as
Megatron-Core's `--overlap-moe-expert-parallel-comm` schedules them.

The schedule runs one micro-batch's forward of a layer together with another
micro-batch's backward of it, splitting the MoE layer into nodes: attention
(with its norms, the router and the dispatch's preprocessing), the dispatch
all-to-all, the experts (mlp) and the combine all-to-all. The all-to-alls run
on a communication stream beside the compute stream, in three stretches
(`TransformerLayerSchedulePlan.run`):

    comm:    combine bwd  | dispatch fwd, then dispatch bwd  | combine fwd
    compute: attention fwd| experts' dgrad, wgrad, then fwd | attention bwd

Each all-to-all hides behind the compute it is paired with, not behind the
whole stage: a stretch lasts as long as the longer of its two streams, and
the dependencies inside the middle one hold (the experts' forward needs its
dispatch; the backward dispatch needs the experts' dgrad; the wgrad is
delayed after it, `--delay-wgrad-compute`).

Overlapped, the all-to-all's kernels hold SMs the compute beside it loses:
NCCL runs one thread block per channel (its channels per GPU family, spec
data), and DeepEP's kernels take a set number of SMs (20 by default, the same
order). A compute kernel running beside them has `1 - share` of the SMs; it
runs at that pace while the communication lasts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerChunks:
    """One MoE layer's compute on one GPU for one micro-batch, split as the
    overlap schedule splits it."""

    attention_forward_s: float  # everything of the layer but the experts
    attention_backward_s: float
    experts_forward_s: float  # the experts with their permutes (the mlp node)
    experts_backward_s: float  # dgrad and wgrad

    @property
    def total_s(self) -> float:
        return (self.attention_forward_s + self.attention_backward_s
                + self.experts_forward_s + self.experts_backward_s)  # fmt: skip


def beside(compute_s: float, comm_s: float, sm_share: float) -> float:
    """Compute of `compute_s` alone, run beside a collective of `comm_s` that
    holds `sm_share` of the SMs: slower while the collective lasts."""
    if sm_share <= 0 or comm_s <= 0:
        return compute_s
    slowed = compute_s / (1.0 - sm_share)
    return slowed if slowed <= comm_s else compute_s + comm_s * sm_share


def paired_layer_s(a2a_s: float, chunks: LayerChunks, sm_share: float = 0.0) -> float:
    """One layer's forward of a micro-batch and backward of another, overlapped:
    the three stretches of the schedule (module doc), `a2a_s` each all-to-all."""
    first = max(a2a_s, beside(chunks.attention_forward_s, a2a_s, sm_share))
    last = max(a2a_s, beside(chunks.attention_backward_s, a2a_s, sm_share))
    # the middle: the experts' backward halves (dgrad, wgrad: equal GEMM work),
    # then their forward, beside the two dispatches
    dgrad = wgrad = chunks.experts_backward_s / 2
    compute = dgrad + wgrad + chunks.experts_forward_s
    slow = beside(compute, 2 * a2a_s, sm_share) / compute if compute else 1.0
    dgrad, wgrad, forward = dgrad * slow, wgrad * slow, chunks.experts_forward_s * slow
    experts_forward_start = max(dgrad + wgrad, a2a_s)
    dispatch_backward_start = max(a2a_s, dgrad)
    middle = max(experts_forward_start + forward, dispatch_backward_start + a2a_s)
    return first + middle + last


def overlapped_exposed_s(a2a_s: float, chunks: LayerChunks, micro_batches: int,
                         sm_share: float = 0.0) -> float:  # fmt: skip
    """The all-to-alls' exposed seconds of one MoE layer, per micro-batch on
    average: the first forward and the last backward have no partner (one
    micro-batch's four all-to-alls show whole); every other micro-batch shows
    what its pairing adds to the compute."""
    m = max(micro_batches, 1)
    paired = max(0.0, paired_layer_s(a2a_s, chunks, sm_share) - chunks.total_s)
    return (4 * a2a_s + (m - 1) * paired) / m
