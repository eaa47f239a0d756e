"""Memory of serving per GPU, and the largest batch whose KV caches fit.

- weights: the parameters at the precision's sizes (`quant.weight_bytes`),
  split evenly over the tp x pp GPUs (tensor parallelism splits every
  weight matrix, pipeline parallelism the layers; the embeddings and the LM
  head, on the first and last stage, are counted in the even share);
- KV cache: per token and sequence, every layer's keys and values as the
  model wrote them (kv_heads x (key + value head size)) at the cache's dtype;
  a GPU holds its ceil(kv_heads / tp) heads of its layers; a batch keeps
  prompt + output tokens per sequence;
- activations: the largest working set of one op of the prefill (its inputs
  and outputs, weights excluded), plus the residual stream held around it;
  engines reuse their buffers from op to op and keep nothing for backward;
- workspace: the CUDA context and the cuBLAS workspace (spec data, as
  `dlperf memory` counts them).

Activations and KV caches grow linearly with the batch, so the largest batch
that fits is solved directly from one traced prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import HardwareSpec
from ..training_memory.step import framework_memory


@dataclass
class ServingMemory:
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    workspace_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes + self.kv_cache_bytes + self.activations_bytes + self.workspace_bytes
        )

    def to_dict(self) -> dict:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activations_bytes": self.activations_bytes,
            "workspace_bytes": self.workspace_bytes,
            "total_bytes": self.total_bytes,
        }


def kv_bytes_per_token(kv_shapes, kv_bytes: int, tp: int = 1, pp: int = 1) -> float:
    """Cache bytes one token of one sequence takes on one GPU (tp = pp = 1: the
    whole model's: layers x 2 x kv_heads x head_dim x dtype bytes)."""
    per_layer = [math.ceil(h / tp) * (dk + dv) * kv_bytes for h, dk, dv in kv_shapes]
    return sum(per_layer) / pp


def activation_bytes(working_set: float, residual_bytes: float) -> float:
    """The largest working set of one prefill op plus the residual stream
    kept around it."""
    return working_set + residual_bytes


def workspace_bytes(spec: HardwareSpec) -> float:
    framework = framework_memory(spec.architecture)
    return float(framework.cuda_context_bytes + framework.cublas_workspace_bytes)


def max_batch(
    spec: HardwareSpec,
    weights: float,
    workspace: float,
    per_sequence: float,
) -> int:
    """The largest batch whose caches and activations (`per_sequence` bytes
    each) fit beside the weights and workspace; 0 when none does."""
    free = spec.memory_bytes - weights - workspace
    if per_sequence <= 0:
        return 0 if free < 0 else 1 << 30
    return max(0, int(free // per_sequence))
