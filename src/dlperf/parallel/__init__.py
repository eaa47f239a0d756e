"""Parallelism plans for N GPUs: data parallel (DDP), ZeRO-1/2, FSDP (ZeRO-3)
and hybrid sharding (HSDP), Megatron tensor parallelism with or without
sequence parallelism, context parallelism (ring attention), expert
parallelism (mixture of experts), pipeline parallelism under the GPipe,
1F1B and interleaved schedules, and activation checkpointing.

Every plan is priced from one trace of the model at the micro-batch size
(`profile.py`): memory per GPU as real runs hold it (`memory.py`), compute
per pipeline stage (`compute.py`), each collective by the ring model
(`network.py`: all-reduce moves 2(n-1)/n of the bytes through every GPU's
link, all-gather, reduce-scatter and all-to-all (n-1)/n) with what overlaps
with compute (`comm.py`), and the pipeline's bubble (`schedule.py`). A step
is m micro-batches through the slowest stage plus the bubble, each stage
slot with the collectives on its critical path, then what the data-parallel
gradients and weights expose once per step, then the optimizer on the
GPU's share of the states.

Conventions and simplifications, stated once:
- Ranks are placed tensor-parallel innermost (within a node), then context,
  data and pipeline parallel (Megatron-LM's order); experts are split over
  ep of the data-parallel ranks. A group's link follows from its place
  (`network.py`).
- Tensor parallelism splits what the data flow of the trace says it splits
  (`tensor_parallel.py`): the linear layers, attention and everything
  between a column- and a row-parallel layer; sequence parallelism splits
  the rest. For a GPT layer this is Korthikanti et al. 2022's accounting.
- Everything is per micro-batch on the GPU that needs the most: the first
  pipeline stage (embeddings, the most micro-batches in flight) or the last
  (head and loss).
- Collectives in the math dtype (bf16/fp16 under AMP) except DDP's
  gradients, which are all-reduced in the weights' dtype (fp32 under AMP).
- GEMMs keep the traced efficiency when split; communication does not slow
  compute down; the host's waits scale with the GPU's time.

Where things are: layout.py (a plan's dimensions), schedule.py, network.py,
tensor_parallel.py, profile.py, memory.py, compute.py, comm.py, pricing.py
(one plan), search.py (the layouts the fixed dimensions leave), fitting.py
(what would make a plan fit), report.py (one run's ranked plans). A new
strategy is a layout dimension (layout.py, search.py), its memory and its
collectives.
"""

from .comm import DDP_BUCKET_BYTES, Collective
from .layout import SHARDINGS, Layout
from .memory import MemoryPerGpu, memory_per_gpu, zero_state_bytes
from .network import (
    DEFAULT_NODE_NETWORK_BYTES_PER_S,
    RING_STEP_LATENCY_S,
    Interconnect,
    interconnect_for,
    ring_time_s,
)
from .pricing import Plan, divisors, price, ranked
from .profile import ModelProfile, profile
from .report import PlanReport, plan_report
from .schedule import SCHEDULE_HELP, Schedule, parse_schedule
from .search import fixed_dimensions, layouts

__all__ = [
    "DDP_BUCKET_BYTES",
    "DEFAULT_NODE_NETWORK_BYTES_PER_S",
    "RING_STEP_LATENCY_S",
    "SCHEDULE_HELP",
    "SHARDINGS",
    "Collective",
    "fixed_dimensions",
    "Interconnect",
    "Layout",
    "MemoryPerGpu",
    "ModelProfile",
    "Plan",
    "PlanReport",
    "Schedule",
    "divisors",
    "interconnect_for",
    "layouts",
    "memory_per_gpu",
    "parse_schedule",
    "plan_report",
    "price",
    "profile",
    "ranked",
    "ring_time_s",
    "zero_state_bytes",
]
