"""`dlperf trace`: profiler traces read as data, checked against plain JSON."""

import gzip
import json
import re
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.measurement.kineto import busy_time_us, read_trace

from .conftest import SHARED_DATA

A100_TRACE = SHARED_DATA / "traces" / "a100_transformer_train_shapes.json.gz"
needs_trace = pytest.mark.skipif(not A100_TRACE.is_file(), reason="../shared/data not present")


@pytest.fixture(scope="module")
def a100_report():
    return dlperf.trace(A100_TRACE)  # about 3 s: read once for the tests below


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
def test_real_a100_trace_matches_plain_json(a100_report):
    count, busy_us, linked = plain_kernel_facts(A100_TRACE)
    data = read_trace(A100_TRACE)
    assert len(data.kernels) == count
    assert busy_time_us(data.kernels) == pytest.approx(busy_us)
    assert sum(k.op is not None for k in data.kernels) <= linked
    report = a100_report
    assert report.gpu == "a100-sxm4-40gb"  # "NVIDIA A100-PG509-200" in deviceProperties
    assert report.kernels == count
    assert report.gpu_busy_s == pytest.approx(busy_us * 1e-6)
    assert report.tensor_core_kernels > 0
    gemms = [r for r in report.rows if r.op in ("aten::mm", "aten::addmm")]
    assert gemms and all(r.achieved_flops_per_s > 0 for r in gemms)
    # an addmm of recorded shapes [M, K] x [K, N] is 2 M N K FLOPs per call
    r = gemms[0]
    (m, k), (_, n) = r.shapes[-2], r.shapes[-1]
    assert r.flops == r.calls * 2 * m * n * k


@needs_trace
def test_real_trace_rows_are_priced_grouped_and_ranked(a100_report):
    with gzip.open(A100_TRACE, "rt") as f:
        kernel_us = sum(e["dur"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel")
    report = a100_report
    # every kernel lands in exactly one priced or unpriced row
    assert sum(r.kernels for r in report.rows) + sum(u.kernels for u in report.unpriced) == (
        report.kernels
    )
    priced_s = sum(r.time_s for r in report.rows)
    assert priced_s + report.unpriced_time_s == pytest.approx(kernel_us * 1e-6)
    # ranked rows all have a roofline figure; identical calls are one row
    assert all(r.roofline_time_s > 0 and r.predicted_time_s > 0 for r in report.rows)
    keys = [(r.op, str(r.shapes), str(r.dtypes), r.tensor_cores) for r in report.rows]
    assert len(keys) == len(set(keys))
    assert any(r.calls > 1 for r in report.rows)
    lost = [r.time_above_roofline_s for r in report.rows]
    assert lost == sorted(lost, reverse=True)
    # the NCCL kernels are listed apart, summed, not ranked
    assert not any(r.kernel.startswith("nccl") for r in report.rows)
    nccl = [u for u in report.unpriced if "NCCL" in u.why]
    assert len(nccl) == 1 and nccl[0].calls > 1


def test_truncated_and_foreign_json(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    with pytest.raises(DlperfError, match="truncated"):
        read_trace(cut)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(DlperfError, match="no traceEvents"):
        read_trace(other)


def test_trace_recorded_on_the_cpu_is_refused(tmp_path, capsys):
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
    with pytest.raises(DlperfError, match="no GPU kernels.*ProfilerActivity.CUDA"):
        dlperf.trace(path, gpu="a100")
    assert main(["trace", str(path), "--gpu", "a100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def _addmm_trace(calls: int, m: int, k: int, n: int) -> dict:
    """`calls` identical fp32 addmm launches of one kernel each, then one NCCL kernel."""
    events, ts = [], 0
    for i in range(calls):
        dims = [[n], [m, k], [k, n], [], []]
        types = ["float", "float", "float", "Scalar", "Scalar"]
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "tid": 1, "ts": ts, "dur": 50,
             "args": {"Input Dims": dims, "Input type": types}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1,
             "ts": ts + 10, "dur": 5, "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "tid": 7,
             "ts": ts + 20, "dur": 40 + i, "args": {"correlation": i}},
        ]  # fmt: skip
        ts += 100
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "tid": 1, "ts": ts, "dur": 50,
         "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": ts + 1,
         "dur": 5, "args": {"correlation": calls}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "tid": 8,
         "ts": ts + 5, "dur": 300, "args": {"correlation": calls}},
    ]  # fmt: skip
    return {"traceEvents": events, "deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB"}]}


def test_identical_calls_are_one_priced_row_and_nccl_is_apart(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_addmm_trace(3, m=256, k=512, n=1024)))
    report = dlperf.trace(path)
    assert len(report.rows) == 1
    row = report.rows[0]
    assert (row.op, row.calls, row.kernels) == ("aten::addmm", 3, 3)
    assert row.flops == 3 * 2 * 256 * 1024 * 512  # 3 calls of 2 M N K
    assert row.time_s == pytest.approx((40 + 41 + 42) * 1e-6)
    assert row.fraction_of_roofline == pytest.approx(row.roofline_time_s / row.time_s)
    assert row.achieved_flops_per_s == pytest.approx(row.flops / row.time_s)
    (comm,) = report.unpriced
    assert (comm.op, comm.calls, comm.time_s) == ("record_param_comms", 1, pytest.approx(300e-6))
    assert "NCCL" in comm.why
    doc = report.to_dict()
    assert doc["unpriced_time_s"] == pytest.approx(300e-6)


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("ts", "12.5", "ts '12.5'"),
        ("dur", [1], "dur [1]"),
        ("dur", -4, "dur -4"),
        ("args", "x", "args 'x'"),
        ("name", 7, "name 7"),
    ],
)
def test_malformed_kernel_fields_are_one_line(tmp_path, capsys, field, value, named):
    doc = _addmm_trace(1, 8, 8, 8)
    kernel = next(i for i, e in enumerate(doc["traceEvents"]) if e["cat"] == "kernel")
    doc["traceEvents"][kernel][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DlperfError, match=rf"traceEvents\[{kernel}\].*{re.escape(named)}"):
        read_trace(path)
    assert main(["trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bool_correlation_is_refused(tmp_path):
    doc = _addmm_trace(1, 8, 8, 8)
    doc["traceEvents"][1]["args"]["correlation"] = True
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DlperfError, match=r"traceEvents\[1\].*args.correlation True"):
        read_trace(path)


def test_odd_input_dims_leave_the_op_unpriced(tmp_path):
    doc = _addmm_trace(1, 8, 8, 8)
    doc["traceEvents"][0]["args"]["Input Dims"] = [["a"], [[8, 8]], [8, True], [], []]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    report = dlperf.trace(path)
    assert report.rows == []
    assert {u.op for u in report.unpriced} == {"aten::addmm", "record_param_comms"}


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


EXAMPLE_TRACE = (
    Path(__file__).resolve().parents[1] / "examples/traces" / "a100_transformer_step.json.gz"
)


def test_the_bundled_example_trace_is_one_real_step():
    # issue 21: a trace in the repo for the README's example, read without ../shared;
    # expected figures computed from the file itself (plain_kernel_facts)
    count, busy_us, _ = plain_kernel_facts(EXAMPLE_TRACE)
    report = dlperf.trace(EXAMPLE_TRACE)
    assert report.gpu == "a100-sxm4-40gb" and report.steps == 1
    assert report.kernels == count > 1000
    assert report.gpu_busy_s == pytest.approx(busy_us * 1e-6)
    assert any(r.predicted_time_s for r in report.rows)  # shapes recorded: priced rows
