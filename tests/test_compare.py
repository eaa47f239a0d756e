"""`dlperf compare` and `dlperf calibrate --trace`: a trace of the model's run
beside the prediction, and the device's corrections fitted from it.

The synthetic traces are written from the prediction itself with known
constants (`trace_factory`), so each fit is checked against the truth; the
real traces of ../shared/data are checked for how much of their time maps.
"""

import json

import pytest
import torch
from torch import nn

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.hardware import gpu
from dlperf.measurement.compare import row_class

from .conftest import SHARED_DATA
from .trace_factory import write_trace

TRACES = SHARED_DATA / "traces"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/data not present")

# The truth the synthetic traces are written with: per class, the factor the
# run is slower than predicted, and a fixed cost per kernel the model lacks.
TRUE_SCALES = {"gemm": 1.3, "memory-bound": 0.8}
TRUE_EXTRA_US = 3.0


def mlp():
    return nn.Sequential(
        nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256), nn.Linear(256, 16)
    )


@pytest.fixture(scope="module")
def predicted():
    return dlperf.analyze(mlp(), torch.empty(64, 256), gpu="a100-sxm4-80gb", precision="fp32")


def true_us(row) -> float:
    return TRUE_SCALES[row_class(row)] * row.time_s * 1e6 + TRUE_EXTRA_US * max(1, row.kernels)


def test_every_synthetic_call_maps_to_its_row(predicted, tmp_path):
    path = tmp_path / "run.json.gz"
    write_trace(path, predicted.rows, true_us, steps=3)
    c = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32")
    assert c.gpu == "a100-sxm4-80gb"  # read from the trace's deviceProperties
    assert c.steps == 3 and c.mapped_share == pytest.approx(1.0)
    assert len(c.rows) == len(predicted.rows) and not c.unmatched_rows
    for row, mine in zip(predicted.rows, c.rows, strict=True):
        assert mine.op == row.op and mine.module == row.module
        assert mine.measured_s == pytest.approx(true_us(row) * 1e-6)
    worst = c.misses[0]
    assert abs(worst.measured_s - worst.predicted_s) == max(
        abs(r.measured_s - r.predicted_s) for r in c.rows
    )


def test_calibration_recovers_the_constants_a_gpu_trace_was_written_with(predicted, tmp_path):
    path = tmp_path / "run.json.gz"
    # kernels queued back to back 2 us apart: the device's own gap
    write_trace(path, predicted.rows, true_us, steps=2, gap_us=lambda row: 2.0)
    out = tmp_path / "mine.toml"
    spec = dlperf.calibrate_trace(path, mlp(), out, inputs=torch.empty(64, 256), precision="fp32")
    c = spec.calibration
    assert c.scales["gemm"] == pytest.approx(1.3, rel=1e-6)
    assert c.scales["memory-bound"] == pytest.approx(0.8, rel=1e-6)
    assert c.kernel_extra_s == pytest.approx(3e-6, rel=1e-6)
    assert c.gemm_exponent == pytest.approx(0.0, abs=1e-6)  # the ratio does not change with size
    assert spec.efficiency.stream_gap_s == pytest.approx(2e-6)
    assert any(k.startswith("scales.attention") for k in c.kept)  # no attention in an MLP
    assert all(r == pytest.approx(0.0, abs=1e-6) for r in c.residuals.values())
    assert not c.notes  # its steps are alike
    # priced with the class factors alone (the layers' own set aside: they
    # would reproduce any trace), each op takes what the trace measured
    import dataclasses

    classes_only = dataclasses.replace(c, layer_scales={})
    spec = dataclasses.replace(spec, calibration=classes_only)
    again = dlperf.analyze(mlp(), torch.empty(64, 256), gpu=spec, precision="fp32")
    for row, before in zip(again.rows, predicted.rows, strict=True):
        assert row.time_s == pytest.approx(true_us(before) * 1e-6, rel=1e-6)


def test_a_cpu_trace_teaches_the_host_gap_between_ops(tmp_path, monkeypatch):
    from .fake_cpu import fake_cpu_doc

    cpu_file = tmp_path / "cpu.json"
    cpu_file.write_text(json.dumps(fake_cpu_doc(2e10, eager_call_overhead_s=5e-6)))
    model, x = mlp(), torch.empty(64, 256)
    rows = dlperf.analyze(model, x, gpu=str(cpu_file), precision="fp32").rows
    path = tmp_path / "cpu_run.json"
    gap = 7.0  # us of framework time after each kernel's call
    write_trace(path, rows, true_us, gpu=None, gap_us=lambda row: gap * max(1, row.kernels))
    spec = dlperf.calibrate_trace(path, model, tmp_path / "c.toml", inputs=x, gpu=str(cpu_file),
                                  precision="fp32")  # fmt: skip
    c = spec.calibration
    assert c.scales["gemm"] == pytest.approx(1.3, rel=1e-6)
    assert c.host_gap_s == pytest.approx(gap * 1e-6, rel=1e-6)
    # the step: every op as measured plus the gaps, as the trace's step spans say
    step = dlperf.analyze(model, x, gpu=spec, precision="fp32").time_s
    expected = sum(true_us(r) + gap * max(1, r.kernels) for r in rows) * 1e-6
    assert step == pytest.approx(expected, rel=1e-6)


def test_calibrated_spec_round_trips_through_gpus_spec(predicted, tmp_path, capsys):
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)
    out = tmp_path / "mine.toml"
    dlperf.calibrate_trace(path, mlp(), out, inputs=torch.empty(64, 256), precision="fp32")
    assert main(["gpus", "--spec", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["spec"]
    assert doc["id"] == "a100-sxm4-80gb-calibrated"
    assert doc["calibration"]["source"] == str(path)
    assert doc["calibration"]["scales"]["gemm"] == pytest.approx(1.3, rel=1e-6)
    assert "scales.gemm" in doc["calibration"]["fitted"]
    assert main(["gpus", "--spec", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "scales.gemm" in shown and "kept the catalogue's value" in shown


def test_a_folder_of_rank_traces_names_the_slowest_and_its_exposed_communication(
    predicted, tmp_path
):
    folder = tmp_path / "ranks"
    folder.mkdir()
    write_trace(folder / "rank0.json", predicted.rows, true_us, rank=0)
    # rank 1 runs every op 1.5x longer, and an all-reduce in each step whose
    # first 20 us run beside its first kernels; the rest, after them, is exposed
    slow = lambda row: 1.5 * true_us(row)  # noqa: E731
    busy = sum(slow(r) for r in predicted.rows)
    nccl = ("ncclKernel_AllReduce_RING_LL_Sum_float", busy - 20.0, 100.0)
    write_trace(folder / "rank1.json", predicted.rows, slow, rank=1, extra_kernels=[nccl])
    r = dlperf.compare(mlp(), folder, inputs=torch.empty(64, 256), precision="fp32")
    assert [c.rank for c in r.ranks] == [0, 1]
    assert r.slowest.rank == 1
    comm = r.ranks[1].communication
    assert comm["kernels"] == 2 and comm["time_s"] == pytest.approx(100e-6)
    assert comm["exposed_s"] == pytest.approx(exposed_us(folder / "rank1.json") / 2 * 1e-6)
    assert 0 < comm["exposed_s"] < comm["time_s"]
    assert comm["unpriced_kernels"] == 2  # no message sizes recorded
    assert r.to_dict()["slowest_rank"] == 1


def exposed_us(path) -> float:
    """NCCL kernel time with no other kernel running, by a sweep over every
    kernel boundary (independent of the reader's interval arithmetic)."""
    kernels = [e for e in json.loads(path.read_text())["traceEvents"] if e["cat"] == "kernel"]
    points = sorted({t for e in kernels for t in (e["ts"], e["ts"] + e["dur"])})

    def running(e, t):
        return e["ts"] <= t < e["ts"] + e["dur"]

    total = 0.0
    for a, b in zip(points, points[1:], strict=False):
        mid = (a + b) / 2
        busy = [e for e in kernels if running(e, mid)]
        if busy and all(e["name"].startswith("nccl") for e in busy):
            total += b - a
    return total


def test_trace_without_model_ops_is_refused_in_one_line(tmp_path):
    from types import SimpleNamespace

    other = [SimpleNamespace(op="aten.some_other_op.default", shapes=[[8, 8]], kernels=1)] * 3
    path = tmp_path / "other.json"
    write_trace(path, other, lambda row: 10.0)
    for call in (
        lambda: dlperf.compare(mlp(), path, inputs=torch.empty(64, 256)),
        lambda: dlperf.calibrate_trace(
            path, mlp(), tmp_path / "x.toml", inputs=torch.empty(64, 256)
        ),
    ):
        with pytest.raises(DlperfError, match="no op of Sequential was found"):
            call()


def test_a_gpu_trace_without_kernels_is_refused(tmp_path):
    path = tmp_path / "cpu_only.json"
    write_trace(path, [], true_us)  # deviceProperties names an A100, no kernel recorded
    with pytest.raises(DlperfError, match="holds no GPU kernels"):
        dlperf.compare(mlp(), path, inputs=torch.empty(64, 256))


def test_a_malformed_calibration_table_is_one_line(predicted, tmp_path):
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)
    out = tmp_path / "mine.toml"
    dlperf.calibrate_trace(path, mlp(), out, inputs=torch.empty(64, 256), precision="fp32")
    text = out.read_text()
    for bad, message in (
        ("gemm_exponent = 400.0", "calibration.gemm_exponent must be a finite number in"),
        ("kernel_extra_s = -1.0", "calibration.kernel_extra_s must be a finite number >= 0"),
        ("kernel_extra_typo = 1.0", "calibration.kernel_extra_typo is not a calibration field"),
    ):
        key = bad.split(" =")[0]
        lines = [ln for ln in text.splitlines() if not ln.startswith(key + " =")]
        at = lines.index("[calibration]") + 1
        broken = tmp_path / "broken.toml"
        broken.write_text("\n".join([*lines[:at], bad, *lines[at:]]) + "\n")
        with pytest.raises(DlperfError, match=message):
            gpu(str(broken))


def test_wrapped_and_nested_calls_anchor_to_the_model_op(predicted, tmp_path):
    """A profiler's call tree: the model op inside a wrapper it does not
    predict (aten::linear around addmm), holding calls of its own (a copy)."""
    path = tmp_path / "nested.json"
    write_trace(path, predicted.rows, true_us, gpu=None, nest=True)
    x = torch.empty(64, 256)
    c = dlperf.compare(mlp(), path, inputs=x, gpu="a100-sxm4-80gb", precision="fp32")
    assert len(c.rows) == len(predicted.rows)
    for row, mine in zip(predicted.rows, c.rows, strict=True):
        assert mine.measured_s == pytest.approx(true_us(row) * 1e-6)  # the anchor's whole span


def test_a_trace_without_shapes_or_step_marks_matches_by_name_and_order(predicted, tmp_path):
    path = tmp_path / "bare.json"
    write_trace(path, predicted.rows, true_us, steps=3, shapes=False, marks=False)
    c = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32")
    assert c.steps == 3  # the calls' repeats of the predicted rows
    assert len(c.rows) == len(predicted.rows)
    for row, mine in zip(predicted.rows, c.rows, strict=True):
        assert mine.op == row.op
        assert mine.measured_s == pytest.approx(true_us(row) * 1e-6)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["calibrate", "--trace", "t.json", "--out", "x.toml"], "--trace needs --model"),
        (["calibrate", "--model", "hf:gpt2", "--out", "x.toml"], "give --trace beside it"),
        (["compare", "hf:gpt2", "--trace", "missing.json"], "does not exist"),
    ],
)
def test_cli_refusals_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@needs_traces
@pytest.mark.parametrize(
    "trace, model, options",
    [
        ("a100_alexnet.json.gz", "torchvision:alexnet", ["--infer", "--batch", "32"]),
        ("v100_cnn_train.json.gz", "torchvision:resnet50", ["--batch", "32"]),
        ("a100_transformer_train_shapes.json.gz", "hf:gpt2:layers=2", ["--batch", "8"]),
    ],
)
def test_real_traces_map_at_least_95_percent_of_their_kernel_time(trace, model, options, capsys):
    argv = ["compare", model, "--trace", str(TRACES / trace), "--precision", "fp32", *options]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mapped_share"] >= 0.95
    assert len(doc["misses"]) == 10
    assert doc["rows"], "some of the model's ops are found in the trace"
    assert main(argv) == 0
    assert "the 10 largest misses" in capsys.readouterr().out


def test_report_shows_the_trace_per_module(predicted, tmp_path):
    from dlperf.measurement.compare import compare_trace
    from dlperf.measurement.kineto import read_trace

    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)
    c = compare_trace(predicted, read_trace(path))
    page = tmp_path / "r.html"
    dlperf.report(predicted, page, comparison=c)
    html = page.read_text()
    assert "Your trace against the prediction" in html
    for m in c.modules:  # every module's row, measured beside predicted
        assert f"<td>{m['module']}</td>" in html


def test_collectives_with_recorded_sizes_are_priced_by_the_collective_model(predicted, tmp_path):
    from dlperf.parallel.collectives import collective_time_s
    from dlperf.parallel.network import interconnect_for

    # PyTorch 2.1+ records a collective's size on its record_param_comms call
    args = {"Collective name": "allreduce", "In msg nelems": 2**24, "Out msg nelems": 2**24,
            "Group size": 2, "dtype": "Float"}  # fmt: skip
    nccl = ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0.0, 900.0, args)
    path = tmp_path / "rank.json"
    write_trace(path, predicted.rows, true_us, steps=2, extra_kernels=[nccl])
    comm = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32").communication
    assert comm["priced_kernels"] == 2 and comm["unpriced_kernels"] == 0
    assert comm["priced_measured_s"] == pytest.approx(900e-6)
    spec = dlperf.gpu("a100-sxm4-80gb")
    expected = collective_time_s("all_reduce", 4 * 2**24, 2, interconnect_for(spec, 2))
    assert comm["priced_predicted_s"] == pytest.approx(expected)


def test_the_traced_models_own_layers_keep_their_factors_at_another_batch(predicted, tmp_path):
    # each op ran at its own factor (not one per class): the run's own kernels
    factors = {id(r): 1.0 + 0.1 * (i % 5) for i, r in enumerate(predicted.rows)}
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, lambda r: factors[id(r)] * r.time_s * 1e6)
    out = tmp_path / "mine.toml"
    dlperf.calibrate_trace(path, mlp(), out, inputs=torch.empty(64, 256), precision="fp32")
    spec = gpu(str(out))
    assert spec.calibration.layer_scales  # one per matched op
    # An op's factor is what it ran at beyond the fitted fixed cost f per
    # kernel: s = (m - f k) / p at batch 64. At batch 128 the same op is
    # s p' + f k, p' its prediction there; the class factor would give others.
    base = dlperf.analyze(mlp(), torch.empty(128, 256), gpu="a100-sxm4-80gb", precision="fp32")
    again = dlperf.analyze(mlp(), torch.empty(128, 256), gpu=spec, precision="fp32")
    f = spec.calibration.kernel_extra_s
    for before, row, after in zip(predicted.rows, base.rows, again.rows, strict=True):
        k = max(1, row.kernels)
        s = (factors[id(before)] * before.time_s - f * k) / before.time_s
        assert after.time_s == pytest.approx(s * row.time_s + f * k, rel=1e-6, abs=1e-12)


def test_math_attention_backward_takes_only_the_nodes_its_own_ops_made(tmp_path):
    """The profiler gives each op the number the next autograd node takes: a
    no-op cast ending SDPA records the number the transpose after it makes."""
    from dlperf.measurement.kineto import read_trace
    from dlperf.measurement.trace_match import anchored_calls

    def op(name, ts, dur, seq):
        return {"ph": "X", "cat": "cpu_op", "name": name, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Sequence number": seq}}  # fmt: skip

    node = "autograd::engine::evaluate_function: "
    events = [
        op("aten::scaled_dot_product_attention", 0, 10, 10),
        op("aten::mul", 1, 2, 10),
        op("aten::bmm", 4, 2, 11),
        op("aten::to", 7, 1, 12),  # makes no node
        op("aten::transpose", 12, 1, 12),  # makes node 12
        op(node + "TransposeBackward0", 18, 1, 12),
        op(node + "BmmBackward0", 20, 4, 11),
        op(node + "MulBackward0", 25, 3, 10),
    ]
    path = tmp_path / "math_sdpa.json"
    path.write_text(json.dumps({"traceEvents": events}))
    names = {"dlperf::attention", "dlperf::attention_backward", "aten::transpose"}
    calls, _ = anchored_calls(read_trace(path), names)
    by_name = {c.name: c for c in calls}
    assert by_name["dlperf::attention_backward"].time_us == 4 + 3  # Bmm's and Mul's nodes
    assert by_name["dlperf::attention_backward"].start_us == 20
    assert by_name["aten::transpose"].time_us == 1


def test_compare_says_when_the_run_had_other_shapes_or_none(predicted, tmp_path):
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)
    same = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32")
    assert same.notes == []
    # the run had batch 64; the user says 32: ops match by name, the note says why
    other = dlperf.compare(mlp(), path, inputs=torch.empty(32, 256), precision="fp32")
    assert len(other.rows) == len(predicted.rows)
    assert other.notes and "check --batch" in other.notes[0]
    bare = tmp_path / "bare.json"
    write_trace(bare, predicted.rows, true_us, shapes=False)
    c = dlperf.compare(mlp(), bare, inputs=torch.empty(64, 256), precision="fp32")
    assert c.notes and "no input shapes" in c.notes[0]


def test_compare_says_when_the_run_optimized_another_way(tmp_path):
    # `measure` steps torch.optim's fused AdamW where this PyTorch has it: a trace
    # of it priced as foreach AdamW is told which flag prices it as run
    x = torch.empty(64, 256)
    fused = dlperf.analyze(mlp(), x, gpu="a100-sxm4-80gb", precision="fp32",
                           optimizer="adamw-fused")  # fmt: skip
    path = tmp_path / "fused.json"
    write_trace(path, fused.rows, true_us)
    (note,) = dlperf.compare(mlp(), path, inputs=x, precision="fp32").notes
    assert "aten::_fused_adamw_" in note and "--optimizer adamw-fused" in note
    as_run = dlperf.compare(mlp(), path, inputs=x, precision="fp32", optimizer="adamw-fused")
    assert as_run.notes == []
    # the other way round: a foreach run priced fused
    foreach = dlperf.analyze(mlp(), x, gpu="a100-sxm4-80gb", precision="fp32")
    path = tmp_path / "foreach.json"
    write_trace(path, foreach.rows, true_us)
    (note,) = dlperf.compare(mlp(), path, inputs=x, precision="fp32", optimizer="adamw-fused").notes
    assert "ran no fused optimizer op" in note and "--optimizer adamw" in note


def test_the_optimizer_phase_is_one_row_with_clipping(tmp_path):
    # the update and clip_grad_norm_ are both optimizer-phase calls in a trace
    # (multi-tensor ops): one compared row holds them, predicted and measured
    x = torch.empty(64, 256)
    clipped = dlperf.analyze(mlp(), x, gpu="a100-sxm4-80gb", precision="fp32", clip_grad=True)
    phase = [r for r in clipped.rows if r.phase == "optimizer"]
    assert [r.op for r in phase] == ["clip_grad_norm", "optimizer.adamw"]
    path = tmp_path / "run.json.gz"
    write_trace(path, clipped.rows, true_us, steps=2)
    c = dlperf.compare(mlp(), path, inputs=x, precision="fp32", clip_grad=True)
    assert len(c.rows) == len(clipped.rows) - 1 and not c.unmatched_rows
    (step,) = [r for r in c.rows if r.phase == "optimizer"]
    assert step.op == "optimizer.adamw"  # the update's row holds the phase
    assert step.predicted_s == pytest.approx(sum(r.time_s for r in phase))
    assert step.kernels == sum(r.kernels for r in phase)
    assert step.measured_s == pytest.approx(sum(true_us(r) for r in phase) * 1e-6)
    # and the fit recovers the constants the trace was written with, as without clipping
    spec = dlperf.calibrate_trace(path, mlp(), tmp_path / "c.toml", inputs=x, precision="fp32",
                                  clip_grad=True)  # fmt: skip
    cal = spec.calibration
    assert cal.scales["gemm"] == pytest.approx(1.3, rel=1e-6)
    assert cal.scales["memory-bound"] == pytest.approx(0.8, rel=1e-6)
    assert cal.kernel_extra_s == pytest.approx(3e-6, rel=1e-6)
    # the phase's factor is each of its rows': repriced, the phase is what was measured
    again = dlperf.analyze(mlp(), x, gpu=spec, precision="fp32", clip_grad=True)
    repriced = sum(r.time_s for r in again.rows if r.phase == "optimizer")
    assert repriced == pytest.approx(step.measured_s, rel=1e-6)


def test_a_disturbed_trace_is_said_to_be_one(predicted, tmp_path, capsys):
    # one of three steps stretched by half (another process took the machine): the
    # calibration says so, in the spec file and in what `gpus --spec` shows
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us, steps=3)
    doc = json.loads(path.read_text())
    (mark,) = [e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#1"]
    mark["dur"] *= 1.5
    path.write_text(json.dumps(doc))
    out = tmp_path / "noisy.toml"
    spec = dlperf.calibrate_trace(path, mlp(), out, inputs=torch.empty(64, 256), precision="fp32")
    (note,) = spec.calibration.notes
    assert "3 steps" in note and "50% apart" in note  # (1.5 - 1) / 1: the median is a plain step
    assert dlperf.gpu(str(out)).calibration.notes == (note,)
    assert main(["gpus", "--spec", str(out)]) == 0
    assert "disturbed" in capsys.readouterr().out


def test_calibrate_refuses_a_trace_of_another_model(predicted, tmp_path):
    # issue 36, item 10: a trace of another model (the same op names, other shapes) was
    # fitted without a word (gemm x14.94, memory-bound x0.10)
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)
    other = nn.Sequential(nn.Linear(256, 4096), nn.GELU(), nn.Linear(4096, 256),
                          nn.LayerNorm(256), nn.Linear(256, 16))  # fmt: skip
    c = dlperf.compare(other, path, inputs=torch.empty(64, 256), precision="fp32")
    assert c.matched_share < 0.5 and c.other_shapes >= 2
    with pytest.raises(DlperfError, match=r"only \d+% of .* predicted time is on ops found"):
        dlperf.calibrate_trace(path, other, tmp_path / "c.toml", inputs=torch.empty(64, 256),
                               precision="fp32")  # fmt: skip
    assert not (tmp_path / "c.toml").exists()
    same = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32")
    assert same.matched_share == pytest.approx(1.0) and same.other_shapes == 0


def test_compare_says_the_trace_ran_on_another_gpu_and_how_many_shapes_differ(predicted, tmp_path):
    # issue 36, item 10: an A100 trace priced on --gpu v100 had no notice, and "98.7%
    # mapped" stood beside "only 1 of 106 matched ops ran with the input shapes predicted"
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)  # deviceProperties: NVIDIA A100-SXM4-80GB
    c = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32", gpu="v100")
    assert "ran on NVIDIA A100-SXM4-80GB (a100-sxm4-80gb) but is priced as v100" in c.notes[0]
    own = dlperf.compare(mlp(), path, inputs=torch.empty(64, 256), precision="fp32")
    assert not any("priced as" in n for n in own.notes)
    from rich.console import Console

    from dlperf.rendering.terminal.compare import compare_report

    other = dlperf.compare(mlp(), path, inputs=torch.empty(32, 256), precision="fp32", gpu="v100")
    console = Console(width=200, record=True)
    compare_report(other, console=console)
    out = " ".join(console.export_text().split())
    matched = len(predicted.rows)
    assert f"({matched} ops matched, {other.other_shapes} of them with other input shapes" in out
    assert other.other_shapes >= matched - 3  # all but the ops without inputs
    assert "but is priced as v100-sxm2-16gb" in out


def test_calibrate_refuses_a_trace_of_another_gpu_than_its_gpu(predicted, tmp_path):
    """An A100's trace fitted onto --gpu v100 would give the V100's spec the A100's
    speed: refused in one line, naming the GPU to calibrate instead."""
    path = tmp_path / "run.json"
    write_trace(path, predicted.rows, true_us)  # deviceProperties: NVIDIA A100-SXM4-80GB
    with pytest.raises(DlperfError, match=r"ran on NVIDIA A100-SXM4-80GB \(a100-sxm4-80gb\), "
                       r"not v100-sxm2-16gb"):  # fmt: skip
        dlperf.calibrate_trace(path, mlp(), tmp_path / "out.toml", inputs=torch.empty(64, 256),
                               precision="fp32", gpu="v100")  # fmt: skip
