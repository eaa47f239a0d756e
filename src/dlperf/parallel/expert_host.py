"""The host's side of Megatron-Core's grouped experts outside CUDA graphs.

Megatron-Core runs a layer's local experts as Transformer Engine's
GroupedLinear (TEGroupedMLP): one GEMM per expert, each issued from the host
with its own setup (the quantizer of its input under an fp8 recipe, the
cuBLASLt call), so the host's work grows with the experts a GPU holds (E /
ep), while their GEMMs shrink as ep grows. Before the experts run, the
dispatcher reads the tokens per expert back to the host (GroupedLinear takes
them as a host list, `m_splits`): the host waits for the GPU there, and has
no lead left when it issues the experts' forward. So a forward's experts take
the longer of their GPU time and their issue. The backward reads nothing
back: the host reaches a layer's experts ahead of the GPU by up to the GPU
time of the attention backward it issued before them (the layer above's),
and the experts' issue shows only beyond that lead and their own GPU time.

A CUDA graph of the whole step (or Megatron-Core's `moe` scope) replays the
experts without the host; the partial scopes (attn, moe_router,
moe_preprocess) leave them to it. The host's seconds per expert GEMM are
spec data (`_framework_host.toml`, `te_expert_gemm_host_s`).
"""

from __future__ import annotations

from .ep_overlap import LayerChunks

# per expert and micro-batch: forward fc1 and fc2; backward their dgrads and wgrads
FORWARD_GEMMS = 2
BACKWARD_GEMMS = 4


def experts_issue_s(local_experts: int, gemm_host_s: float) -> tuple[float, float]:
    """Host seconds to issue one MoE layer's local experts, (forward, backward),
    at `gemm_host_s` an expert GEMM."""
    per_expert = local_experts * gemm_host_s
    return per_expert * FORWARD_GEMMS, per_expert * BACKWARD_GEMMS


def experts_exposed_s(local_experts: int, chunks: LayerChunks,
                      gemm_host_s: float) -> tuple[float, float]:  # fmt: skip
    """Seconds one MoE layer's expert issue adds to its GPU time, (forward,
    backward), per micro-batch (module doc)."""
    issue_f, issue_b = experts_issue_s(local_experts, gemm_host_s)
    forward = max(0.0, issue_f - chunks.experts_forward_s)
    lead = chunks.attention_backward_s
    backward = max(0.0, issue_b - chunks.experts_backward_s - lead)
    return forward, backward
