"""`dlperf measure` and `dlperf calibrate` on the CPU."""

import json

import torch
from torch import nn

import dlperf
from dlperf.cli import main
from dlperf.hardware import load_spec_file
from dlperf.measurement.calibrate import fit_saturation, to_toml


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3),
        nn.Flatten(),
        nn.Linear(8 * 14 * 14, 10),
    )


def test_measure_matches_every_contraction_op_of_a_small_cnn(monkeypatch, tmp_path):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    x = torch.empty(4, 3, 16, 16, device="meta")
    report = dlperf.measure(small_cnn(), x, device="cpu", training=True, steps=2)
    contractions = [o for o in report.ops if o["category"] == "contraction"]
    # forward: 2 convolutions + 1 addmm; backward: 2 convolution_backward + 2 mm
    assert len(contractions) == 7
    assert all(o["measured_time_s"] and o["measured_time_s"] > 0 for o in contractions)
    assert report.measured_time_s > 0 and report.predicted_time_s > 0
    doc = report.to_dict()
    for key in ("device", "predicted_time_s", "measured_time_s", "error", "ops", "categories"):
        assert key in doc


def test_saturation_fit_recovers_a_known_plateau():
    latency, bandwidth, units, sat = 2e-6, 20e9, 4, 2.0**14
    points = []
    for moved in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8):
        fill = min(1.0, moved / (units * sat) * 3.0)
        points.append((moved, latency + moved / (bandwidth * fill)))
    assert fit_saturation(points, latency, bandwidth, units) == sat


def test_calibrated_spec_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    out = tmp_path / "my-cpu.toml"
    assert main(["calibrate", "--device", "cpu", "--out", str(out), "--json"]) == 0
    spec = load_spec_file(out)
    assert spec.kind == "cpu" and spec.peak_flops_per_s("fp32") > 1e8
    doc = json.loads(json.dumps(spec.to_dict()))
    doc.pop("path")
    again = tmp_path / "again.toml"
    again.write_text(to_toml({k: v for k, v in doc.items() if v is not None and v != []}))
    assert load_spec_file(again).to_dict() | {"path": ""} == spec.to_dict() | {"path": ""}
    result = dlperf.gemm(256, 256, 256, dtype="fp32", gpu=str(out))
    assert result.time_s > 0
