"""Memory of serving per GPU, and the largest batch whose KV caches fit.

- weights: the parameters at the precision's sizes (`quant.weight_bytes`),
  split evenly over the tp x pp GPUs (tensor parallelism splits every
  weight matrix, pipeline parallelism the layers; the embeddings and the LM
  head, on the first and last stage, are counted in the even share);
- KV cache: per token and sequence, every layer's keys and values as the
  model wrote them (kv_heads x (key + value head size)) at the cache's dtype;
  a GPU holds its ceil(kv_heads / tp) heads of its layers; a batch keeps
  prompt + output tokens per sequence;
- activations: what the engine reserves for its largest forward, one chunk
  of `max_num_batched_tokens` tokens (vLLM sizes it by a profile run of that
  many tokens; prefills longer than it run in chunks): the largest working
  set of one op (its inputs and outputs, weights excluded; a tensor-parallel
  shard at 1/tp) plus the residual stream held around it, from the traced
  prefill scaled to the chunk's tokens (each op's tensors grow linearly with
  the tokens when attention is fused); engines reuse their buffers from op
  to op and keep nothing for backward;
- workspace: the CUDA context and the cuBLAS workspace (spec data, as
  `dlperf memory` counts them).

The engine may use `gpu_memory_utilization` of the card (vLLM's 0.9 by
default); the KV cache gets what weights, activations and workspace leave,
in blocks of `block_size` tokens (a sequence holds whole blocks). So the
largest batch that fits is solved directly: the budget left over, divided by
one sequence's blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import HardwareSpec
from ..jsonable import fields_dict
from ..run_config import ServingConfig
from ..training_memory.step import overhead_bytes


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
        return fields_dict(self) | {"total_bytes": self.total_bytes}


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
    return float(overhead_bytes(spec))


def max_batch(budget: float, fixed: float, per_sequence: float) -> int:
    """The largest batch whose caches (`per_sequence` bytes each) fit in the
    `budget` beside the `fixed` bytes (weights, activations, workspace); 0
    when none does."""
    free = budget - fixed
    if per_sequence <= 0:
        return 0 if free < 0 else 1 << 30
    return max(0, int(free // per_sequence))


# vLLM's defaults (vllm/engine/arg_utils.py, `get_batch_defaults`, the OpenAI
# server's): GPUs of 70 GiB or more except the A100 get the larger budgets.
GPU_MEMORY_UTILIZATION = ServingConfig.gpu_memory_utilization  # vLLM's default
BLOCK_SIZE = ServingConfig.block_size  # tokens per KV cache block


def default_max_num_batched_tokens(spec: HardwareSpec) -> int:
    """The tokens vLLM's server schedules per step at most on `spec`."""
    return 8192 if _large(spec) else 2048


def default_max_num_seqs(spec: HardwareSpec) -> int:
    """The sequences vLLM's server runs per step at most on `spec`."""
    return 1024 if _large(spec) else 256


def _large(spec: HardwareSpec) -> bool:
    return spec.memory_bytes >= 70 * 2**30 and "a100" not in spec.id


def cached_tokens(tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """The cache slots a sequence of `tokens` holds: whole blocks."""
    return -(-tokens // block_size) * block_size
