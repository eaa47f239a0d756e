"""The host's side of a step: issuing its kernels, and the GPU idling for it.

Eager PyTorch pays on the CPU, for every op, its framework cost (Python,
dispatcher, autograd) and, for every kernel, a launch in the driver. One
stream runs the kernels in order: a kernel starts when the host has issued
it and the previous one has finished, so whenever kernels are shorter than
their issue the GPU waits (the guides' latency-limited regime, at the scale
of the whole step). The host runs ahead of the GPU by at most the driver's
launch queue (`launch_queue_depth` pending kernels; a full queue blocks the
next launch), so a slow optimizer loop after a long backward still shows.
A step starts from host and GPU in step (the loss read, AMP's inf check),
the conservative case: a loop with no sync lets the host run ahead into the
next step and hides part of the first issue.

- eager: each op costs `eager_op_host_s` per framework call (`host_ops`,
  one unless the row says more: a per-parameter optimizer loop) plus
  `kernel_launch_host_s` per kernel;
- compiled (torch.compile without CUDA graphs): each kernel of the forward,
  backward and recompute costs `compiled_kernel_host_s` (Inductor's wrapper,
  no dispatch or autograd per op); the optimizer stays eager;
- CUDA graphs: one `graph_launch_host_s` replays the whole step.

Kernels back to back do not touch: the next starts a gap after the previous
ends (`fixed_costs`, measured on profiler traces), counted as idle time of the
GPU; the per-op rows are device times.

An op of several kernels is issued kernel by kernel, its host cost and its
GPU time shared evenly among them, so a long optimizer loop overlaps its own
kernels. On a CPU the host is the device: each op's price already holds its
eager cost (`pricing._cpu_eager_s`) and nothing overlaps, so the step is the
plain sum. The figures are spec data (`hardware/specs/_framework_host.toml`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..hardware import HardwareSpec
from ..hardware.framework import FrameworkHost, framework_host
from ..jsonable import fields_dict
from ..kinds import Phase
from .fixed_costs import gap_s

# Rows of these phases run inside torch.compile's graphs; the optimizer step
# runs eager after them.
_COMPILED_PHASES = {Phase.FORWARD.value, Phase.BACKWARD.value, Phase.RECOMPUTE.value}


@dataclass
class HostTimeline:
    """One step on a single stream, host issuing and GPU running."""

    # End of the GPU's last kernel: the step's time.
    step_s: float
    # Sum of the kernels' own times.
    gpu_busy_s: float
    # When the host has issued the last kernel.
    host_s: float
    # GPU time between kernels (step_s - gpu_busy_s): waiting for the host, and the
    # gaps between kernels back to back.
    idle_s: float
    idle_by_phase_s: dict[str, float] = field(default_factory=dict)
    cuda_graphs: bool = False
    compiled: bool = False

    @property
    def idle_share(self) -> float:
        return self.idle_s / self.step_s if self.step_s > 0 else 0.0

    def to_dict(self) -> dict:
        """The fields, with `idle_share` beside the idle time it is a share of."""
        out = {}
        for key, value in fields_dict(self).items():
            out[key] = value
            if key == "idle_s":
                out["idle_share"] = self.idle_share
        return out


def _phase(row) -> str:
    return str(row.phase)


def _row_host_s(row, costs: FrameworkHost, compiled: bool) -> float:
    """Host seconds to issue one row's kernels, outside CUDA graphs."""
    kernels = max(0, int(row.kernels))
    if compiled and _phase(row) in _COMPILED_PHASES:
        return kernels * costs.compiled_kernel_host_s
    host_ops = int(getattr(row, "host_ops", 1))
    return host_ops * costs.eager_op_host_s + kernels * costs.kernel_launch_host_s


def _plain_sum(rows: list, cuda_graphs: bool, compiled: bool) -> HostTimeline:
    total = float(sum(r.time_s for r in rows))
    return HostTimeline(total, total, 0.0, 0.0, {}, cuda_graphs, compiled)


def _run(
    host: list[float],
    gpu: list[float],
    queue: int,
    syncs: list[bool] | None = None,
    gap_s: float = 0.0,
) -> tuple[float, float, np.ndarray]:
    """(end of the GPU's last kernel, end of the host's last issue, the GPU's
    wait before each kernel) of kernels issued in order on one stream.

    The host issues kernel i after kernel i-1 and, once `queue` launches are
    pending, only after kernel i-queue has finished; the GPU starts it once
    issued and once kernel i-1 has finished. After a kernel marked in
    `syncs` the host waits for the GPU to finish it (a value read back).
    A kernel issued while the previous one still runs starts `gap_s` after it
    ends (`fixed_costs`); one the GPU had to wait for starts when issued.
    """
    ends = [0.0] * len(gpu)
    idle = [0.0] * len(gpu)
    syncs = syncs or [False] * len(gpu)
    issued = end = 0.0
    for i, (h, g) in enumerate(zip(host, gpu, strict=True)):
        gate = ends[i - queue] if i >= queue else 0.0
        issued = max(issued, gate) + h
        if issued > end:
            idle[i] = issued - end
            end = issued
        elif i:
            idle[i] = gap_s
            end += gap_s
        end += g
        ends[i] = end
        if syncs[i]:
            issued = end
    return end, issued, np.array(idle)


def issue_timeline(
    rows: Iterable, spec: HardwareSpec, *, cuda_graphs: bool = False, compiled: bool = False
) -> HostTimeline:
    """The step of `rows` (an analysis' OpRows, in trace order: `time_s`,
    `kernels`, `phase`, and `host_ops` where a row is more than one framework
    call, `host_sync` where the host waits for the GPU after it) as the host
    issues it to one GPU stream.

    On a CPU spec the plain sum of the rows' times (their prices hold the host).
    """
    rows = list(rows)
    if spec.kind == "cpu" or not rows:
        return _plain_sum(rows, cuda_graphs, compiled)
    costs = framework_host(spec.architecture)
    # One item per kernel (one for a row that launches none).
    per_row = np.array([max(1, int(r.kernels)) for r in rows])
    gpu_row = np.array([float(r.time_s) for r in rows])
    if cuda_graphs:
        host_row = np.zeros(len(rows))
    else:
        host_row = np.array([_row_host_s(r, costs, compiled) for r in rows])
    gpu = np.repeat(gpu_row / per_row, per_row)
    host = np.repeat(host_row / per_row, per_row)
    if cuda_graphs:
        host[0] = costs.graph_launch_host_s
    # the host waits after a row's last kernel where the row reads a value back
    last = np.cumsum(per_row) - 1
    syncs = np.zeros(len(gpu), dtype=bool)
    syncs[last] = [bool(getattr(r, "host_sync", False)) for r in rows]
    gap = gap_s(spec, cuda_graphs)
    end, issued, idle = _run(
        host.tolist(), gpu.tolist(), int(costs.launch_queue_depth), syncs.tolist(), gap
    )
    phases = np.repeat(np.array([_phase(r) for r in rows]), per_row)
    by_phase: dict[str, float] = {}
    for name in dict.fromkeys(phases.tolist()):
        by_phase[name] = float(idle[phases == name].sum())
    return HostTimeline(
        step_s=end,
        gpu_busy_s=float(gpu.sum()),
        host_s=issued,
        idle_s=float(idle.sum()),
        idle_by_phase_s=by_phase,
        cuda_graphs=cuda_graphs,
        compiled=compiled,
    )
