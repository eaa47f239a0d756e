"""The CPU as a device: probe it once, cache the result, build a spec.

The probe measures what this machine achieves (matmul FLOP/s per dtype, a
streaming add's bandwidth, the rate the OS hands out fresh pages for a large
new tensor, the CPU flash attention kernel's rate, dropout's random numbers,
the cost of one tiny call, the host's cost per op of an eager training step,
how convolutions fall short of the matmul rate); the spec's rate efficiencies
are therefore 1. It keeps to a time budget
(PROBE_BUDGET_S, seconds) and says what it measures on stderr. The result is
cached as JSON in the user's cache directory (DLPERF_CACHE_DIR overrides it),
keyed by the machine and torch.

A probe taken while the machine was busy would be trusted forever, so the
cache also keeps when it was taken, the load then, and one small matmul's
rate (`QUICK_SIZE`). Each use measures that matmul again (about a tenth of
a second): a machine now faster by more than `QUICK_TOLERANCE` means the
probe ran under load, and it is taken again (said on stderr); a machine now
slower is busy now, and the user is told that predictions are for it idle.
A cache without these figures (written by hand, or by a test) is trusted.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from ..costs import AttentionShape
from ..errors import DlperfError
from . import probe
from .spec import HardwareSpec, spec_from_dict

# 4: the cache keeps when, under what load, and a quick matmul's rate; 5: fresh pages'
# rate; 6: the CPU flash attention kernel's rate; 7: dropout's random numbers
PROBE_VERSION = 7
QUICK_SIZE = 256  # the matmul measured on each use
QUICK_BUDGET_S = 0.1
QUICK_TOLERANCE = 1.3  # a rate off by more than this factor disagrees


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


def _last_level_cache_bytes() -> int:
    """Size of the CPU's last-level cache (L3, else L2), from sysfs; 1 MiB if unknown."""
    best_level, size = 0, 2**20
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
            if level > best_level:
                best_level, size = level, int(text.rstrip("KM")) * scale
        except (OSError, ValueError, IndexError):
            continue
    return size


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


# Wall-clock seconds the whole probe may take, shared among its parts below.
PROBE_BUDGET_S = 20.0
_SHARES = {
    "fp32": 0.25,
    "fp64": 0.1,
    "bf16": 0.1,
    "stream": 0.1,
    "touch": 0.03,
    "random": 0.02,
    "latency": 0.05,
    "eager": 0.12,
    "attention": 0.05,
    "conv": 0.18,
}


def _to_stderr(line: str) -> None:
    # looked up at call time, so a rich status on stderr prints it above its spinner
    sys.stderr.write(f"dlperf: {line}\n")
    sys.stderr.flush()


def _cpu_name() -> str:
    import torch

    try:
        name = torch.cpu.get_capabilities().get("cpu_name", "")
    except (AttributeError, RuntimeError):
        name = ""
    return str(name).strip() or platform.processor() or platform.machine()


def conv_reduction_knee(points: list[tuple[float, float]], peak_flops_per_s: float) -> float:
    """The knee c0 with which rate = peak * c / (c + c0) best fits (reduction c, rate) points.

    Least squares in log rate over a grid of powers of two (0 for none).
    """
    best, best_err = 0.0, float("inf")
    for knee in [0.0] + [2.0**e for e in range(0, 13)]:
        err = sum(math.log(peak_flops_per_s * c / (c + knee) / rate) ** 2 for c, rate in points)
        if err < best_err:
            best, best_err = knee, err
    return best


# PyTorch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp),
# forward and backward alike: query blocks of 32, 64 or 256 rows (queries under
# 192, under 768, more), each run against key blocks of 512 up to its last causal
# key; a key block is computed whole and its masked part filled afterwards.
CPU_FLASH_KEY_BLOCK = 512
CPU_FLASH_QUERY_BLOCKS = ((192, 32), (768, 64))  # (queries under, rows a block)
CPU_FLASH_LONG_QUERY_BLOCK = 256


def cpu_flash_useful_share(shape: AttentionShape) -> float:
    """The scores PyTorch's CPU flash kernel computes that a causal mask keeps
    (`AttentionShape.flops` counts those), over the scores it computes."""
    if not shape.causal:
        return 1.0
    q, kv = shape.q_len, shape.kv_len
    rows = next((r for below, r in CPU_FLASH_QUERY_BLOCKS if q < below), CPU_FLASH_LONG_QUERY_BLOCK)
    computed = 0
    for start in range(0, q, rows):
        block = min(rows, q - start)
        keys = min(start + block, kv)
        computed += block * min(kv, math.ceil(keys / CPU_FLASH_KEY_BLOCK) * CPU_FLASH_KEY_BLOCK)
    return min(1.0, q * kv / 2 / computed) if computed else 1.0


def probe_cpu(budget_s: float | None = None, progress=None) -> dict:
    """Measure this machine and return a spec document (plain data).

    Takes about `budget_s` seconds (PROBE_BUDGET_S by default); `progress`
    gets one line per measured figure (stderr by default).
    """
    import torch

    budget = PROBE_BUDGET_S if budget_s is None else budget_s
    say = progress or _to_stderr
    threads = torch.get_num_threads()
    load = _load_per_core()
    quick = _quick_rate()
    clock_mhz = 1000.0  # nominal: only the product SMs x clock x MACs matters here
    say(f"measuring this CPU once ({threads} threads, about {budget:.0f} s; the result is cached)")
    units = _probe_matmuls(threads, clock_mhz, budget, say)
    llc, bandwidth, speedup = _probe_streaming(budget, say)
    touch, drawn, latency, eager = _probe_host(budget, say)
    attention, knee = _probe_kernels(units["fp32"]["peak_flops_per_s"], budget, say)
    return {
        "id": "cpu",
        "name": f"{_cpu_name()} ({threads} threads, probed)",
        "kind": "cpu",
        "architecture": "cpu",
        "sm_count": threads,
        "boost_clock_mhz": clock_mhz,
        "memory_bytes": _memory_bytes(),
        "memory_bandwidth_bytes_per_s": bandwidth,
        "l2_cache_bytes": llc,  # a CPU's last-level cache
        "sources": [f"probed by dlperf on this machine (torch {torch.__version__})"],
        "math": units,
        "efficiency": {
            # measured rates: nothing to discount
            "streaming_dram_efficiency": 1.0,
            "kernel_latency_s": latency,
            "eager_call_overhead_s": eager,
            "conv_reduction_knee": knee,
            "llc_streaming_speedup": speedup,
            "first_touch_bytes_per_s": touch,
            "random_elements_per_s": drawn,
            "attention_flash_forward_efficiency": attention[0],
            "attention_flash_backward_efficiency": attention[1],
        },
        "probe": {"taken_at": time.time(), "load_per_core": load, "quick_flops_per_s": quick},
    }


def _probe_matmuls(threads: int, clock_mhz: float, budget: float, say) -> dict:
    """The spec's math units: each dtype's matmul rate, as MACs per clock per
    thread at the nominal clock."""
    units = {}
    for dtype in ("fp32", "fp64", "bf16"):
        sizes = probe.MATMUL_SIZES
        if dtype == "bf16" and not probe.native_bf16():
            sizes = (probe.EMULATED_BF16_SIZE,)
        rate = probe.matmul_flops_per_s(dtype, budget_s=budget * _SHARES[dtype], sizes=sizes)
        say(f"  {dtype} matmul: {rate / 1e9:.1f} GFLOP/s")
        units[dtype] = {
            "peak_flops_per_s": rate,
            "macs_per_clock_per_sm": rate / (2 * threads * clock_mhz * 1e6),
            "tensor_cores": False,
        }
    return units


def _probe_streaming(budget: float, say) -> tuple[int, float, float]:
    """(last-level cache bytes, DRAM bandwidth, how much faster a stream runs
    in that cache)."""
    llc = _last_level_cache_bytes()
    share = budget * _SHARES["stream"] / 2
    big = min(max(64 * 2**20, 2 * llc), _memory_bytes() // 16)  # well past the cache
    bandwidth = probe.stream_bandwidth_bytes_per_s(big, budget_s=share)
    # three buffers filling a quarter of the cache: in it, whatever the eviction policy
    cached = probe.stream_bandwidth_bytes_per_s(llc // 12, budget_s=share)
    speedup = max(1.0, cached / bandwidth)
    say(f"  streaming add: {bandwidth / 1e9:.1f} GB/s, {cached / 1e9:.1f} GB/s in cache")
    return llc, bandwidth, speedup


def _probe_host(budget: float, say) -> tuple[float, float, float, float]:
    """What the host costs beside the math: (fresh pages' bytes/s, random
    numbers a second, one call's latency, an eager training step's seconds
    per op beyond that latency)."""
    touch = probe.first_touch_bytes_per_s(budget_s=budget * _SHARES["touch"])
    say(f"  fresh pages of a large new tensor: {touch / 1e9:.1f} GB/s")
    drawn = probe.random_elements_per_s(budget_s=budget * _SHARES["random"])
    say(f"  dropout's random numbers: {1e9 / drawn:.1f} ns each")
    latency = probe.call_latency_s(budget_s=budget * _SHARES["latency"])
    per_op = probe.eager_step_s_per_op(budget_s=budget * _SHARES["eager"])
    # a recorded op pays its kernel's latency in the model already; the rest is the host's
    eager = max(0.0, per_op - latency)
    say(f"  one call: {latency * 1e6:.1f} us; eager training step: {eager * 1e6:.1f} us per op")
    return touch, drawn, latency, eager


def _probe_kernels(
    peak_flops_per_s: float, budget: float, say
) -> tuple[tuple[float, float], float]:
    """How the attention and convolution kernels fall short of the fp32
    matmul rate: ((forward, backward) attention efficiency, the conv knee)."""
    attention = _attention_efficiencies(peak_flops_per_s, budget)
    say(f"  causal attention (CPU flash kernel): {attention[0]:.0%} of the matmul rate "
        f"forward, {attention[1]:.0%} backward")  # fmt: skip
    points = probe.conv_flops_per_s(budget_s=budget * _SHARES["conv"])
    knee = conv_reduction_knee(points, peak_flops_per_s)
    say(f"  convolutions: {', '.join(f'{r / 1e9:.1f}' for _, r in points)} GFLOP/s")
    return attention, knee


def _attention_efficiencies(peak_flops_per_s: float, budget: float) -> tuple[float, float]:
    """(forward, backward) rate of PyTorch's CPU flash kernel on the probe's
    shape, as a share of the fp32 matmul rate over the scores it computes:
    the efficiency `kernels.attention` prices every CPU flash call with."""
    b, h, s, d = probe.ATTENTION_PROBE_SHAPE
    times = probe.attention_seconds(budget_s=budget * _SHARES["attention"])
    found = []
    for phase, seconds in zip(("forward", "backward"), times, strict=True):
        shape = AttentionShape(b, h, h, s, s, d, d, True, "fp32", "fp32", "", 0.0, phase, "flash")
        rate = shape.flops / seconds / cpu_flash_useful_share(shape)
        found.append(min(1.0, rate / peak_flops_per_s))
    return found[0], found[1]


_RECHECKED: set[str] = set()


def _load_per_core() -> float | None:
    """The 1-minute load average per core (None where the OS does not say)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def _quick_rate() -> float:
    return probe.matmul_flops_per_s("fp32", budget_s=QUICK_BUDGET_S, sizes=(QUICK_SIZE,))


def _recheck(doc: dict) -> bool:
    """Whether a cached probe still holds (the module docstring); says why not."""
    taken = doc.get("probe")
    if not isinstance(taken, dict) or not taken.get("quick_flops_per_s"):
        return True
    now, then = _quick_rate(), float(taken["quick_flops_per_s"])
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(taken.get("taken_at", 0)))
    if now > QUICK_TOLERANCE * then:
        _to_stderr(
            f"dlperf: this CPU runs a small matmul {now / then:.1f}x faster than when it was "
            f"probed ({when}, busy then?): probing it again"
        )
        return False
    if then > QUICK_TOLERANCE * now:
        _to_stderr(
            f"dlperf: this CPU runs {then / now:.1f}x slower than when it was probed ({when}): "
            "it is busy now; predictions are for it idle, measurements now will be slower"
        )
    return True


def cpu_spec(refresh: bool = False) -> HardwareSpec:
    """The probed local CPU, from the cache when it holds this machine."""
    path = cache_dir() / f"cpu-{_machine_key()}.json"
    doc = None
    if path.is_file() and not refresh:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            doc = None  # a damaged cache is measured again
        if isinstance(doc, dict) and str(path) not in _RECHECKED and not _recheck(doc):
            doc = None
    _RECHECKED.add(str(path))  # once a process, and never right after a probe
    if doc is None:
        doc = probe_cpu()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2))
        except OSError as err:
            raise DlperfError(f"cannot write the CPU probe cache {path}: {err}") from None
        _to_stderr(f"  cached in {path} (delete it to measure again, on an idle machine)")
    return spec_from_dict({k: v for k, v in doc.items() if k != "probe"}, where=str(path))
