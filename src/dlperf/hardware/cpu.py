"""The CPU as a device: probe it once, cache the result, build a spec.

The probe measures what this machine achieves (matmul FLOP/s per dtype, a
streaming copy's bandwidth, the cost of one tiny call); the spec's efficiency
constants are therefore 1. The result is cached as JSON in the user's cache
directory (DLPERF_CACHE_DIR overrides it), keyed by the machine and torch.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from ..errors import DlperfError
from .spec import HardwareSpec, spec_from_dict

PROBE_VERSION = 2


def cache_dir() -> Path:
    root = os.environ.get("DLPERF_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    base = Path(root) if root else Path.home() / ".cache"
    return base / "dlperf" if not os.environ.get("DLPERF_CACHE_DIR") else base


def _machine_key() -> str:
    import torch

    parts = [
        platform.machine(),
        platform.processor() or "cpu",
        str(torch.get_num_threads()),
        torch.__version__,
        str(PROBE_VERSION),
    ]
    return "-".join(p.replace(" ", "_").replace("/", "_") for p in parts)


def _l2_bytes() -> int:
    path = Path("/sys/devices/system/cpu/cpu0/cache/index2/size")
    try:
        text = path.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
        return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        return 2**20


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def probe_cpu() -> dict:
    """Measure this machine and return a spec document (plain data)."""
    import torch

    from ..measurement import probe

    threads = torch.get_num_threads()
    clock_mhz = 1000.0  # nominal: only the product SMs x clock x MACs matters here
    math = {}
    for dtype in ("fp32", "fp64", "bf16"):
        rate = probe.matmul_flops_per_s(dtype)
        math[dtype] = {
            "peak_flops_per_s": rate,
            "macs_per_clock_per_sm": rate / (2 * threads * clock_mhz * 1e6),
            "tensor_cores": False,
        }
    return {
        "id": "cpu",
        "name": f"{platform.processor() or platform.machine()} ({threads} threads, probed)",
        "kind": "cpu",
        "architecture": "cpu",
        "sm_count": threads,
        "boost_clock_mhz": clock_mhz,
        "memory_bytes": _memory_bytes(),
        "memory_bandwidth_bytes_per_s": probe.copy_bandwidth_bytes_per_s(),
        "l2_cache_bytes": _l2_bytes(),
        "sources": [f"probed by dlperf on this machine (torch {torch.__version__})"],
        "math": math,
        "efficiency": {"kernel_latency_s": probe.call_latency_s()},
    }


def cpu_spec(refresh: bool = False) -> HardwareSpec:
    """The probed local CPU, from the cache when it holds this machine."""
    path = cache_dir() / f"cpu-{_machine_key()}.json"
    doc = None
    if path.is_file() and not refresh:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            doc = None  # a damaged cache is measured again
    if doc is None:
        doc = probe_cpu()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2))
        except OSError as err:
            raise DlperfError(f"cannot write the CPU probe cache {path}: {err}") from None
    return spec_from_dict(doc, where=str(path))
