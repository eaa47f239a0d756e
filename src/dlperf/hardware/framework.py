"""The framework's figures as spec data, one file per subject: each holds a
[default] table and, where a family differs, a table named after the
architecture (`architecture_table`); the figures and their sources are in the
files.

`specs/_framework_host.toml`: what PyTorch and the CUDA driver spend on the
CPU to issue work to a GPU (an eager op, a kernel launch, a compiled kernel,
a CUDA graph replay).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path

from .spec import SPECS_DIR, tomllib

FRAMEWORK_HOST_FILE = SPECS_DIR / "_framework_host.toml"


@dataclass(frozen=True)
class FrameworkHost:
    """Host seconds per unit of issued work."""

    # One eager framework op before its launch (Python, dispatcher, autograd).
    eager_op_host_s: float
    # One kernel launch in the driver.
    kernel_launch_host_s: float
    # One kernel of torch.compile's generated wrapper, launch included.
    compiled_kernel_host_s: float
    # One CUDA graph replay of the whole step.
    graph_launch_host_s: float
    # Kernels the driver queues on a stream before a launch blocks.
    launch_queue_depth: float
    # One expert's GEMM of Transformer Engine's GroupedLinear, issued with its setup.
    te_expert_gemm_host_s: float


@functools.cache
def _tables(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def architecture_table(path: Path, architecture: str) -> dict:
    """The figures of a framework file for `architecture`: its own table's over
    the [default] table's."""
    tables = _tables(path)
    return {**tables["default"], **tables.get(architecture, {})}


@functools.cache
def framework_host(architecture: str = "default") -> FrameworkHost:
    """The host costs for a GPU of `architecture` (the [default] table where
    the family has none of its own)."""
    values = architecture_table(FRAMEWORK_HOST_FILE, architecture)
    known = {f.name for f in fields(FrameworkHost)}
    return FrameworkHost(**{k: float(v) for k, v in values.items() if k in known})
