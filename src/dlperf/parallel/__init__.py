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

Where things are: network.py, the links and the ring model (defaults in
hardware/specs/_interconnect.toml); pricing.py, one plan's memory, compute
and collectives (a new strategy is a layout and its collectives there);
report.py, one run's profile and ranked plans.
"""

from .network import (
    DEFAULT_NODE_NETWORK_BYTES_PER_S,
    RING_STEP_LATENCY_S,
    Interconnect,
    interconnect_for,
    ring_time_s,
)
from .pricing import (
    OVERLAP_SHARE,
    TP_SPLIT_SHARE,
    Collective,
    ModelProfile,
    Plan,
    divisors,
    plans,
    price,
    zero_state_bytes,
)
from .report import PlanReport, plan_report, profile

__all__ = [
    "DEFAULT_NODE_NETWORK_BYTES_PER_S",
    "OVERLAP_SHARE",
    "RING_STEP_LATENCY_S",
    "TP_SPLIT_SHARE",
    "Collective",
    "Interconnect",
    "ModelProfile",
    "Plan",
    "PlanReport",
    "divisors",
    "interconnect_for",
    "plan_report",
    "plans",
    "price",
    "profile",
    "ring_time_s",
    "zero_state_bytes",
]
