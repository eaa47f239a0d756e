"""Memory of one training step per GPU, from the traced model.

Persistent state per parameter: weights and gradients by the precision
policy, optimizer states by `optimizer.py` (step.py). Activations are exactly
the tensors autograd saved for backward in the fake-tensor trace (one count
per distinct storage, parameters excluded), attributed to the module that ran
when they were saved. Autocast's weight copies are counted with the weights
(the 2 B of mixed precision's 6 B), not twice.

The allocated peak is the largest of the end of forward, the backward pass
and the optimizer step (step.py); the caching allocator's reserve beyond it
comes from replaying the step's allocations through the allocator's rules
(allocator.py, reserved.py). Checkpointing (checkpointing.py: none, full,
every:K, selective) keeps only each segment's input, or drops what the
attention cores create; the same regions give the recompute events that
backward runs (`with_recompute`), priced in time like any other event.
report.py makes `dlperf memory`'s report of one run, with the checkpointing
what-ifs and the largest batch and sequence that fit.
"""

from ..checkpointing import (
    CHECKPOINT_HELP,
    CheckpointPlan,
    Region,
    attention_cores,
    checkpoint_plan,
    core_saved_bytes,
    parse_checkpoint,
    recompute_events,
    recompute_modules,
    recompute_regions,
    recomputes_attention,
    region_saved_bytes,
    regions,
    segments,
    with_recompute,
)
from ..models.inputs import resize_inputs
from ..optimizer import OPTIMIZERS, state_bytes
from .partitioner import partitioned
from .report import (
    CHECKPOINT_WHAT_IFS,
    CheckpointOption,
    MemoryReport,
    block_times,
    largest,
    memory_report,
    recompute_price,
)
from .reserved import step_peaks
from .step import (
    CUDA_CONTEXT_BYTES,
    FrameworkMemory,
    StepMemory,
    by_module,
    framework_memory,
    optimizer_bytes,
    overhead_bytes,
    state_bytes_per_param,
    step_memory,
    transient_bytes,
)

__all__ = [
    "CHECKPOINT_HELP",
    "CHECKPOINT_WHAT_IFS",
    "CUDA_CONTEXT_BYTES",
    "OPTIMIZERS",
    "CheckpointOption",
    "CheckpointPlan",
    "FrameworkMemory",
    "MemoryReport",
    "Region",
    "StepMemory",
    "attention_cores",
    "block_times",
    "by_module",
    "checkpoint_plan",
    "core_saved_bytes",
    "recompute_modules",
    "recompute_regions",
    "recomputes_attention",
    "region_saved_bytes",
    "framework_memory",
    "largest",
    "memory_report",
    "optimizer_bytes",
    "overhead_bytes",
    "parse_checkpoint",
    "partitioned",
    "recompute_events",
    "recompute_price",
    "regions",
    "resize_inputs",
    "segments",
    "state_bytes",
    "state_bytes_per_param",
    "step_memory",
    "step_peaks",
    "transient_bytes",
    "with_recompute",
]
