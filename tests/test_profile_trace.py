"""`dlperf trace`: profiler traces read as data, checked against plain JSON."""

import gzip
import json

import pytest
import torch

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.measurement.kineto import busy_time_us, read_trace

from .conftest import SHARED_DATA

A100_TRACE = SHARED_DATA / "traces" / "a100_transformer_train_shapes.json.gz"
needs_trace = pytest.mark.skipif(not A100_TRACE.is_file(), reason="../shared/data not present")


def plain_kernel_facts(path):
    """Kernel count, busy microseconds and linked kernels, computed independently."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    busy, current_start, current_end = 0, None, None
    for start, end in spans:  # merge overlapping intervals
        if current_end is None or start > current_end:
            if current_end is not None:
                busy += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    busy += current_end - current_start
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", "")
    }
    linked = sum(1 for e in kernels if e["args"].get("correlation") in launches)
    return len(kernels), busy, linked


@needs_trace
def test_real_a100_trace_matches_plain_json():
    count, busy_us, linked = plain_kernel_facts(A100_TRACE)
    data = read_trace(A100_TRACE)
    assert len(data.kernels) == count
    assert busy_time_us(data.kernels) == pytest.approx(busy_us)
    assert sum(k.op is not None for k in data.kernels) <= linked
    report = dlperf.trace(A100_TRACE)
    assert report.gpu == "a100-sxm4-40gb"  # "NVIDIA A100-PG509-200" in deviceProperties
    assert report.kernels == count
    assert report.gpu_busy_s == pytest.approx(busy_us * 1e-6)
    assert report.tensor_core_kernels > 0
    gemms = [r for r in report.rows if r.op in ("aten::mm", "aten::addmm") and r.flops]
    assert gemms and all(r.achieved_flops_per_s > 0 for r in gemms)
    # an addmm of recorded shapes [M, K] x [K, N] is 2 M N K FLOPs
    r = gemms[0]
    (m, k), (_, n) = r.shapes[-2], r.shapes[-1]
    assert r.flops == 2 * m * n * k


def test_truncated_and_foreign_json(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    with pytest.raises(DlperfError, match="truncated"):
        read_trace(cut)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(DlperfError, match="no traceEvents"):
        read_trace(other)


def test_trace_recorded_on_the_cpu(tmp_path):
    model = torch.nn.Linear(32, 16)
    x = torch.randn(8, 32)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
    ) as prof:
        model(x).sum().backward()
    path = tmp_path / "cpu_trace.json"
    prof.export_chrome_trace(str(path))
    data = read_trace(path)
    assert data.kernels == []
    ops = [e for e in data.cpu_ops if e["name"] == "aten::addmm"]
    assert ops and ops[0]["args"]["Input Dims"][1] == [8, 32]
    report = dlperf.trace(path, gpu="a100")
    assert report.kernels == 0 and report.gpu_busy_s == 0


@needs_trace
def test_cli_trace_json(capsys):
    assert main(["trace", str(A100_TRACE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in (
        "gpu",
        "kernels",
        "gpu_busy_s",
        "gpu_idle_s",
        "steps",
        "tensor_core_kernels",
        "rows",
    ):
        assert key in doc
    for key in (
        "kernel",
        "op",
        "shapes",
        "dtype",
        "time_s",
        "flops",
        "bytes",
        "achieved_flops_per_s",
        "achieved_bytes_per_s",
        "predicted_time_s",
        "fraction_of_roofline",
        "tensor_cores",
    ):
        assert key in doc["rows"][0]
