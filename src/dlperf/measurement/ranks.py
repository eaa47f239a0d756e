"""Traces of one run's ranks, side by side: the slowest rank, and each
rank's communication against dlperf's model of the same collectives.

A collective's size is read from its `record_param_comms` call (PyTorch
records the message's element count, dtype, group size and collective name
there since 2.1); a trace without them gets its communication measured, but
not priced, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..dtypes import bytes_per_element
from ..errors import DlperfError
from ..parallel.collectives import collective_time_s
from ..parallel.network import interconnect_for
from .kineto import Kernel

# PyTorch's collective names (record_param_comms' "Collective name") -> dlperf's kinds
_KINDS = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "_allgather_base": "all_gather",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
}
_DTYPES = {"Float": "fp32", "BFloat16": "bf16", "Half": "fp16", "Double": "fp64"}


def rank_traces(path) -> list[Path]:
    """The trace files at `path`: itself, or a folder's .json and .json.gz files."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DlperfError(f"trace {path} does not exist; give a profiler trace or a folder of them")
    found = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not found:
        raise DlperfError(f"{path} holds no .json or .json.gz traces; write one per rank there")
    return found


@dataclass
class RankComparison:
    path: str
    ranks: list = field(default_factory=list)  # one Comparison per trace, in file order

    @property
    def slowest(self):
        return max(self.ranks, key=lambda c: c.measured_step_s)

    def to_dict(self, misses: int = 10) -> dict:
        slow = self.slowest
        index = next(i for i, c in enumerate(self.ranks) if c is slow)
        return {
            "path": self.path,
            "slowest_rank": slow.rank if slow.rank is not None else index,
            "slowest_trace": slow.path,
            "ranks": [c.to_dict(misses) for c in self.ranks],
        }


def collective_call(op: dict | None) -> tuple[str, float, int] | None:
    """(kind, bytes, ranks) a launching op records, or None."""
    if op is None:
        return None
    args = op.get("args", {})
    kind = _KINDS.get(str(args.get("Collective name", "")).lower())
    nelems, group = args.get("In msg nelems"), args.get("Group size")
    dtype = _DTYPES.get(args.get("dtype")) if isinstance(args.get("dtype"), str) else None
    if not kind or not dtype or not all(_count(v) for v in (nelems, group)):
        return None
    if kind == "all_gather":  # the whole gathered buffer
        out = args.get("Out msg nelems")
        nelems = out if _count(out) else nelems * group
    return kind, float(nelems) * bytes_per_element(dtype), group


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def priced_collectives(comm: list[Kernel], spec, steps: int) -> dict:
    """Measured and predicted seconds per step of the collectives whose size
    the trace records; how many it does not."""
    measured = predicted = 0.0
    priced = unpriced = 0
    for k in comm:
        found = collective_call(k.op)
        if found is None:
            unpriced += 1
            continue
        kind, nbytes, ranks = found
        # a group of up to 8 is taken as one node's NVLink (the trace does not say)
        net = interconnect_for(spec, gpus_per_node=min(ranks, 8))
        predicted += collective_time_s(kind, nbytes, ranks, net)
        measured += k.duration_us * 1e-6
        priced += 1
    return {
        "priced_kernels": priced,
        "unpriced_kernels": unpriced,
        "priced_measured_s": measured / steps,
        "priced_predicted_s": predicted / steps,
    }
