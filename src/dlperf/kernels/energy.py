"""The energy of a step, from the power model of `clocks.py`.

A card draws `idle_power_share` of its TDP whatever it runs, and its TDP
(or its power cap, if lower) under a full load of the unit that limits the
kernel: every Tensor Core busy at the sustained clock for a math-bound
GEMM, the memory interface at its peak for a streaming kernel. Between,
the dynamic part scales with the busier of the two: a kernel's achieved
FLOP rate over its dtype's peak, or its bytes per second over the
bandwidth. While the GPU waits for the host it draws the idle power.

For a streaming kernel this is an upper bound (HBM and the load/store path
at full rate draw less than every SM's math); the estimate says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DTYPES
from ..hardware import HardwareSpec
from ..jsonable import Jsonable


@dataclass(frozen=True)
class StepEnergy(Jsonable):
    """Joules of one step on one GPU, and what they are made of."""

    joules: float
    kernel_joules: float  # the kernels, idle share included
    idle_joules: float  # the waits between kernels
    average_watts: float
    cap_watts: float  # the card's TDP, or its power cap


def _cap_and_idle(spec: HardwareSpec) -> tuple[float, float]:
    tdp = spec.tdp_watts or 0.0
    cap = min(tdp, spec.power_limit_watts) if spec.power_limit_watts else tdp
    return cap, spec.efficiency.idle_power_share * tdp


def kernel_watts(spec: HardwareSpec, flops: float, nbytes: float, dtype: str, time_s: float):
    """The card's draw while a kernel runs (module docstring)."""
    cap, idle = _cap_and_idle(spec)
    if time_s <= 0:
        return idle
    known = dtype in DTYPES and spec.has_dtype(dtype)  # an integer op's "int64" is not math
    math = flops / time_s / spec.peak_flops_per_s(dtype) if known else 0.0
    memory = nbytes / time_s / spec.memory_bandwidth_bytes_per_s
    return idle + (cap - idle) * min(1.0, max(math, memory))


def rows_joules(spec: HardwareSpec, rows, time_s: float) -> float | None:
    """Joules of one GPU running `rows` over `time_s` (the rest of it waiting at
    idle; collectives counted as waiting); None where the spec states no power."""
    split = _joules(spec, rows, time_s)
    return sum(split) if split else None


def _joules(spec: HardwareSpec, rows, time_s: float) -> tuple[float, float] | None:
    """(the kernels' joules, the waits' joules) of `rows` over `time_s`."""
    cap, idle = _cap_and_idle(spec)
    if spec.kind == "cpu" or not cap:
        return None
    kernels = [r for r in rows if r.family != "collective"]
    busy = sum(r.time_s for r in kernels)
    running = sum(kernel_watts(spec, r.flops, r.bytes, r.dtype, r.time_s) * r.time_s
                  for r in kernels)  # fmt: skip
    return running, max(0.0, time_s - busy) * idle


def step_energy(analysis) -> StepEnergy | None:
    """The step's energy on its GPU; None where the spec states no power (a CPU)."""
    step = analysis.step_time_s
    split = _joules(analysis.spec, analysis.rows, step)
    if split is None:
        return None
    kernels, waiting = split
    joules = kernels + waiting
    cap, _ = _cap_and_idle(analysis.spec)
    return StepEnergy(joules, kernels, waiting, joules / step if step else 0.0, cap)
