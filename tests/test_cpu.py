"""The CPU as a device: the probe, its cache, and the timing harness."""

import json

import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.hardware import cpu
from dlperf.measurement.timing import time_callable


def test_timing_harness_reports_median_and_spread():
    import torch

    x = torch.randn(256, 256)
    m = time_callable(lambda: x @ x, warmup=1, repeats=6)
    assert m.median_s > 0
    assert m.spread_s >= 0
    assert len(m.samples_s) == 6
    assert m.min_s <= m.median_s


def test_timing_harness_refuses_a_non_callable():
    with pytest.raises(DlperfError, match="not callable"):
        time_callable(42)


def test_cpu_probe_is_measured_once_then_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    spec = dlperf.gpu("cpu")
    assert spec.kind == "cpu" and spec.id == "cpu"
    assert spec.peak_flops_per_s("fp32") > 1e8  # any machine does 0.1 GFLOP/s
    assert spec.memory_bandwidth_bytes_per_s > 1e8
    cached = list(tmp_path.glob("cpu-*.json"))
    assert len(cached) == 1
    json.loads(cached[0].read_text())  # plain JSON, never a pickle

    def no_probe():
        raise AssertionError("probed again instead of reading the cache")

    monkeypatch.setattr(cpu, "probe_cpu", no_probe)
    again = dlperf.gpu("local")
    assert again.peak_flops_per_s("fp32") == spec.peak_flops_per_s("fp32")
