"""Pricing one plan from a profile of the model: memory per GPU (memory.py),
compute per stage (compute.py), each collective with what overlaps
(comm.py), the pipeline's bubble (schedule.py), throughput and MFU. The
conventions are stated once, in the package docstring."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hardware import HardwareSpec
from ..jsonable import fields_dict, jsonable
from .comm import Collective, collectives
from .compute import stage_times
from .layout import Layout
from .memory import MemoryPerGpu, memory_per_gpu, offloaded_blocks
from .network import Interconnect
from .profile import ModelProfile


@dataclass
class Plan:
    dp: int
    tp: int
    pp: int
    zero: int
    micro_batch: int
    accumulate: int  # micro-batches per step through each pipeline (m)
    memory_per_gpu_bytes: float
    comm_time_s: float
    exposed_comm_s: float
    compute_time_s: float
    step_time_s: float
    samples_per_s: float
    tokens_per_s: float | None
    fits: bool
    collectives: list[Collective] = field(default_factory=list)
    cp: int = 1
    ep: int = 1
    sharding: str = "none"
    schedule: str = "none"
    checkpoint: str = "none"
    offload_layers: int = 0  # blocks whose activations go to host memory
    offload_exposed_s: float = 0.0  # their copies' time the compute does not hide, a step
    sequence_parallel: bool = False
    bubble_time_s: float = 0.0
    tokens_per_s_per_gpu: float | None = None
    mfu: float = 0.0
    memory: MemoryPerGpu | None = None
    # what would make a plan that does not fit fit (filled for the plans shown)
    to_fit: list[str] = field(default_factory=list)
    # the JSON says the layout by its `name`
    layout: Layout | None = field(default=None, repr=False, compare=False, metadata={"json": False})

    @property
    def name(self) -> str:
        base = self.layout.name if self.layout else f"dp{self.dp}-tp{self.tp}-pp{self.pp}"
        base = base if self.checkpoint == "none" else f"{base}-ckpt:{self.checkpoint}"
        return f"{base}-offload:{self.offload_layers}" if self.offload_layers else base

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def collective(self, name: str) -> Collective | None:
        """The collective named "group op" ("dp all_reduce", "pp send"), if any."""
        return next((c for c in self.collectives if c.name == name), None)

    def to_dict(self) -> dict:
        """The plan's figures, then its name, collectives and memory: the order
        the JSON has always had."""
        out = fields_dict(self, skip=("collectives", "memory"))
        parts = {"collectives": jsonable(self.collectives), "memory": jsonable(self.memory)}
        return out | {"name": self.name} | parts


def price(profile: ModelProfile, spec: HardwareSpec, net: Interconnect, at: Layout) -> Plan:
    """One plan priced: memory, compute, collectives, step time, throughput."""
    memory = memory_per_gpu(profile, spec, at)
    times = stage_times(profile, at)
    found, per_slot, once = collectives(profile, net, at, times)
    m, v = at.micro_batches, at.schedule.chunks
    bubble = (at.pp - 1) / v * times.stage_s
    compute = m * times.stage_s + bubble + times.optimizer_s
    exposed = (m + (at.pp - 1) / v) * per_slot + once
    step = compute + exposed
    global_batch = at.dp * m * at.micro_batch
    tokens = global_batch * profile.tokens_per_sample / step if profile.tokens_per_sample else None
    gpus = at.gpus
    flops = profile.model_flops * global_batch / max(profile.micro_batch, 1)
    peak = profile.peak_flops_per_s
    return Plan(
        dp=at.dp,
        tp=at.tp,
        pp=at.pp,
        zero=at.zero,
        micro_batch=at.micro_batch,
        accumulate=m,
        memory_per_gpu_bytes=memory.total_bytes,
        comm_time_s=sum(c.time_s for c in found),
        exposed_comm_s=exposed,
        compute_time_s=compute,
        step_time_s=step,
        samples_per_s=global_batch / step,
        tokens_per_s=tokens,
        fits=memory.total_bytes <= spec.memory_bytes,
        collectives=found,
        cp=at.cp,
        ep=at.ep,
        sharding=at.sharding,
        schedule=at.schedule.name,
        checkpoint=profile.checkpoint,
        offload_layers=offloaded_blocks(profile, at),
        offload_exposed_s=m * times.offload_s,
        sequence_parallel=at.sequence_parallel,
        bubble_time_s=bubble,
        tokens_per_s_per_gpu=tokens / gpus if tokens else None,
        mfu=flops / step / gpus / peak if peak else 0.0,
        memory=memory,
        layout=at,
    )


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def ranked(found: list[Plan]) -> list[Plan]:
    """Plans that fit, fastest first; then the others, nearest to fitting first."""
    fitting = sorted((p for p in found if p.fits), key=lambda p: p.step_time_s)
    others = sorted(
        (p for p in found if not p.fits), key=lambda p: (p.memory_per_gpu_bytes, p.step_time_s)
    )
    return fitting + others
