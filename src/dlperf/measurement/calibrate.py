"""`dlperf calibrate`: measure the device at hand and write a spec file.

A fixed micro-benchmark suite: square matmuls per dtype (peak math rate), a
streaming add (bandwidth), element-wise adds over sizes (the small-tensor
plateau), and an almost empty call (launch latency); on a CPU also the host's
cost per op of an eager training step and convolutions' efficiency. The spec it writes loads
with `--gpu my-device.toml` like any other. The CPU probe behind `--gpu cpu`
runs the same probes.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import torch

from ..errors import DlperfError
from ..hardware import probe
from ..hardware.cpu import probe_cpu
from ..hardware.spec import load_spec_file
from ..hardware.timing import time_callable
from ..kernels.attention import architecture_of

PLATEAU_SIZES = (2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22)


def elementwise_sweep(device: str = "cpu") -> list[tuple[float, float]]:
    """(bytes moved, seconds) of x + y over sizes: 3 tensors of 4-byte elements."""
    points = []
    for n in PLATEAU_SIZES:
        x = torch.ones(n, device=device)
        out = torch.empty_like(x)
        m = time_callable(
            lambda x=x, out=out: torch.add(x, x, out=out), warmup=3, repeats=7, min_sample_s=0.01
        )
        points.append((3.0 * 4 * n, m.median_s))
    return points


def fit_saturation(
    points, latency: float, bandwidth: float, units: int, share: float = 3.0
) -> float:
    """Bytes in flight per unit that best explain the sweep (least squares in log time)."""
    best, best_err = 65536.0, float("inf")
    for exponent in range(8, 26):
        sat = 2.0**exponent
        err = 0.0
        for moved, seconds in points:
            fill = min(1.0, moved / (units * sat) * share)
            predicted = latency + moved / (bandwidth * fill)
            err += math.log(predicted / seconds) ** 2
        if err < best_err:
            best, best_err = sat, err
    return best


def calibrate_device(device: str = "cpu") -> dict:
    if device == "cuda" and not torch.cuda.is_available():
        raise DlperfError("no CUDA device here; use --device cpu")
    if device not in ("cpu", "cuda"):
        raise DlperfError(f"unknown device {device!r}; use cpu or cuda")
    doc = probe_cpu() if device == "cpu" else _probe_cuda()
    doc.pop("probe", None)  # the cache's own record; a spec file is the device's facts
    eff = doc.setdefault("efficiency", {})
    points = elementwise_sweep(device)
    eff["saturation_bytes_per_sm"] = fit_saturation(
        points, eff["kernel_latency_s"], doc["memory_bandwidth_bytes_per_s"], doc["sm_count"]
    )
    doc["sources"] = doc.get("sources", []) + [
        "dlperf calibrate: matmul, streaming add, element-wise sweep and call-latency probes"
    ]
    return doc


def _probe_cuda() -> dict:
    props = torch.cuda.get_device_properties(0)
    cc = f"{props.major}.{props.minor}"
    architecture = architecture_of(props.major, props.minor)
    if architecture is None:
        raise DlperfError(
            f"{props.name} has compute capability {cc}, older than any GPU family dlperf "
            "prices (Maxwell, 5.2, on)"
        )
    clock_mhz, clock_source = sm_clock_mhz(props)
    sms = props.multi_processor_count
    math_units = {}
    for dtype in ("fp32", "fp16", "bf16"):
        rate = probe.matmul_flops_per_s(dtype, 4096, "cuda")
        math_units[dtype] = {
            "peak_flops_per_s": rate,
            "tensor_cores": dtype != "fp32",
            # at the clock written beside it: the spec's computed peak is the measured rate
            "macs_per_clock_per_sm": rate / (2 * sms * clock_mhz * 1e6),
        }
    return {
        "id": "cuda-calibrated",
        "name": f"{props.name} (calibrated)",
        "kind": "gpu",
        "architecture": architecture,
        "compute_capability": cc,
        "sm_count": sms,
        "boost_clock_mhz": clock_mhz,
        "memory_bytes": props.total_memory,
        "memory_bandwidth_bytes_per_s": probe.stream_bandwidth_bytes_per_s(2**30, "cuda"),
        "l2_cache_bytes": getattr(props, "L2_cache_size", 40 * 2**20),
        "math": math_units,
        "efficiency": {
            "kernel_latency_s": probe.call_latency_s("cuda"),
            "tensor_math_efficiency": 1.0,
            "simt_math_efficiency": 1.0,
            "dram_efficiency": 1.0,
            "streaming_dram_efficiency": 1.0,
        },
        "sources": [f"boost clock: {clock_source}"],
    }


def sm_clock_mhz(props) -> tuple[float, str]:
    """The GPU's highest SM clock in MHz, and where it was read: PyTorch's device
    properties (`clock_rate`, kHz), else nvidia-smi's `clocks.max.sm`. Neither
    there is an error: a made-up clock would skew every per-clock figure."""
    khz = getattr(props, "clock_rate", 0) or 0
    if khz > 0:
        return khz / 1e3, "torch.cuda.get_device_properties clock_rate"
    mhz, why = _nvidia_smi_max_sm_clock(props)
    if mhz:
        return mhz, "nvidia-smi clocks.max.sm"
    raise DlperfError(
        f"cannot read the SM clock of {props.name}: this PyTorch's device properties have "
        f"no clock_rate, and nvidia-smi gave none ({why}); dlperf calibrate needs the clock "
        "to write the spec's per-clock rates"
    )


def _nvidia_smi_max_sm_clock(props) -> tuple[float | None, str]:
    """(MHz, "") from `nvidia-smi --query-gpu=clocks.max.sm` for this GPU, else (None, why)."""
    cmd = ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:  # the GPU PyTorch calls 0 (CUDA_VISIBLE_DEVICES may renumber them)
        cmd.append(f"--id={uuid if uuid.startswith(('GPU-', 'MIG-')) else 'GPU-' + uuid}")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"{cmd[0]}: {err}"
    if proc.returncode != 0:
        return None, (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if len(lines) != 1:
        return None, f"{len(lines)} GPUs listed and none named" if lines else "no output"
    try:
        mhz = float(lines[0])
    except ValueError:
        return None, f"clocks.max.sm is {lines[0]!r}"
    return (mhz, "") if mhz > 0 else (None, f"clocks.max.sm is {lines[0]!r}")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def to_toml(doc: dict) -> str:
    """A spec document as TOML: scalars first, then one table per nested table
    ([math.fp16], [efficiency], [calibration], [calibration.scales], ...)."""
    head = "# Written by `dlperf calibrate`: measured on this machine."
    return "\n".join([head, *_toml_table(doc, "")]) + "\n"


def _toml_table(doc: dict, name: str) -> list[str]:
    lines = [f"\n[{name}]"] if name else []
    for key, value in doc.items():
        if value is not None and not isinstance(value, dict):
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in doc.items():
        if isinstance(value, dict):
            lines += _toml_table(value, f"{name}.{_toml_key(key)}" if name else _toml_key(key))
    return lines


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def calibrated_document(base, calibration, overrides: dict) -> dict:
    """The spec file of `base` corrected by a trace: the catalogue device's own
    facts, the fitted constants, and where they came from."""
    doc = base.to_dict()
    for key in ("path", "aliases", "device_names", "calibration"):
        doc.pop(key, None)
    doc["id"] = f"{base.id}-calibrated"
    doc["name"] = f"{base.name} (calibrated on {Path(calibration.source).name})"
    doc["sources"] = [*base.sources, f"dlperf calibrate --trace {calibration.source}"]
    doc["efficiency"] = {**doc["efficiency"], **overrides}
    doc["calibration"] = calibration.to_dict()
    return doc


def write_spec(doc: dict, out: str | Path):
    out = Path(out)
    out.write_text(to_toml(doc))
    return load_spec_file(out)  # proves the file loads
