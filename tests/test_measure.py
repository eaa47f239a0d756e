"""`dlperf measure` and `dlperf calibrate` on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.hardware import cpu, load_spec_file
from dlperf.hardware.spec import spec_from_dict
from dlperf.kernels.attention import architecture_of
from dlperf.measurement import calibrate
from dlperf.measurement.calibrate import fit_saturation, to_toml
from dlperf.measurement.kineto import matrix_kernel, tensor_core_kernel
from dlperf.measurement.run import (
    _step_fn,
    adamw_as_run,
    materialize,
    real_inputs,
    tensor_core_usage,
)
from dlperf.rendering.terminal.measurement import tensor_core_line
from dlperf.run import resolve_model
from tests.fake_cpu import fake_cpu_doc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cached_cpu(monkeypatch, tmp_path):
    """A CPU probe already in the cache (made-up figures), so that no test waits for one."""
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    doc = fake_cpu_doc(2e10, kernel_latency_s=2e-6, eager_call_overhead_s=1e-5)
    path = cpu.cache_dir() / f"cpu-{cpu._machine_key()}.json"
    path.write_text(json.dumps(doc))
    return tmp_path


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3),
        nn.Flatten(),
        nn.Linear(8 * 14 * 14, 10),
    )


def test_measure_matches_every_contraction_op_of_a_small_cnn(cached_cpu):
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
    monkeypatch.setattr(cpu, "PROBE_BUDGET_S", 0.5)  # a small budget: seconds, not minutes
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


def test_measure_leaves_the_callers_model_and_inputs_unchanged(cached_cpu):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    model = model.to(memory_format=torch.channels_last).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 8, 8)
    x_before = x.clone()
    # a training step with AdamW and batch-norm statistics, on what the caller passed
    dlperf.measure(model, x, device="cpu", training=True, steps=1)
    after = model.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert torch.equal(after[key], value), key
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert model.training is False
    assert torch.equal(x, x_before)


def test_measure_leaves_a_meta_model_on_meta(cached_cpu):
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    dlperf.measure(model, torch.empty(2, 16, device="meta"), device="cpu", steps=1)
    assert all(p.is_meta for p in model.parameters())


def test_measure_refuses_a_gpu_it_cannot_run_on(cached_cpu):
    x = torch.empty(4, 3, 16, 16, device="meta")
    with pytest.raises(DlperfError, match="dlperf analyze --gpu"):
        dlperf.measure(small_cnn(), x, device="cpu", gpu="h100")


def test_measure_json_keeps_stdout_and_stderr_clean(cached_cpu):
    """The CUDA build of torch logs profiler lines and `gpuGetDeviceCount failed`
    on a machine without a GPU; none of it may reach the user's terminal."""
    env = dict(os.environ, DLPERF_CACHE_DIR=str(cached_cpu))
    argv = ["measure", "examples/tiny_cnn.py:model", "--input", "2x3x16x16", "--steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", *argv, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    doc = json.loads(done.stdout)  # one JSON document and nothing else
    assert doc["device"] == "cpu" and doc["measured_time_s"] > 0


def test_measure_takes_the_cpu_spec_file_calibrate_writes(cached_cpu, tmp_path):
    # issue 21, item 1: measure's --help offers --gpu, but it refused calibrate's own file
    spec_file = tmp_path / "my-cpu.toml"
    spec_file.write_text(to_toml(fake_cpu_doc(3e10, kernel_latency_s=2e-6)))
    x = torch.randn(2, 3, 16, 16)
    report = dlperf.measure(small_cnn(), x, device="cpu", gpu=str(spec_file), steps=1)
    assert report.measured_time_s > 0
    gpu_file = ROOT / "src/dlperf/hardware/specs/t4.toml"  # a GPU's spec: not this machine
    with pytest.raises(DlperfError, match="dlperf analyze --gpu"):
        dlperf.measure(small_cnn(), x, device="cpu", gpu=str(gpu_file), steps=1)


def test_auto_precision_on_a_cpu_is_fp32_in_every_verb(cached_cpu):
    # issue 21, item 2: auto picked amp-bf16 on a CPU whose probe listed bf16 math, where a
    # step ran 531 ms against 321 ms in fp32, and measure defaulted to fp32: two runs
    from dlperf.precision import resolve_for

    doc = fake_cpu_doc(2e10)
    doc["math"]["bf16"] = {"peak_flops_per_s": 2e11, "macs_per_clock_per_sm": 50.0,
                           "tensor_cores": False}  # fmt: skip
    assert resolve_for(spec_from_dict(doc), "auto").name == "fp32"  # bf16 listed, and faster
    assert resolve_for(dlperf.gpu("cpu"), "auto").name == "fp32"
    x = torch.randn(2, 3, 16, 16)
    measured = dlperf.measure(small_cnn(), x, device="cpu", steps=1)
    predicted = dlperf.analyze(small_cnn(), x, gpu="cpu")
    assert measured.precision == predicted.precision == "fp32"


def test_a_probe_taken_under_load_is_taken_again(monkeypatch, tmp_path, capsys):
    # issue 21, item 1: a probe cached while the machine was busy was trusted forever
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "_RECHECKED", set())
    busy = fake_cpu_doc(2e10)
    busy["probe"] = {"taken_at": 0.0, "load_per_core": 1.9, "quick_flops_per_s": 1e9}
    path = cpu.cache_dir() / f"cpu-{cpu._machine_key()}.json"
    path.write_text(json.dumps(busy))
    idle = fake_cpu_doc(4e10)
    idle["probe"] = {"taken_at": 1.0, "load_per_core": 0.1, "quick_flops_per_s": 2e9}
    monkeypatch.setattr(cpu, "probe_cpu", lambda: idle)
    monkeypatch.setattr(cpu, "_quick_rate", lambda: 2e9)  # twice the rate cached: 2 > 1.3
    spec = cpu.cpu_spec()
    assert spec.memory_bandwidth_bytes_per_s == 4e10  # the new probe's
    assert "faster than when it was probed" in capsys.readouterr().err
    assert json.loads(path.read_text())["probe"]["quick_flops_per_s"] == 2e9
    # checked once a process: the next use trusts the new cache without measuring
    monkeypatch.setattr(cpu, "_quick_rate", lambda: pytest.fail("measured twice"))
    assert cpu.cpu_spec().memory_bandwidth_bytes_per_s == 4e10


def test_a_machine_busy_now_keeps_its_probe_and_is_told(monkeypatch, capsys):
    slow_now = fake_cpu_doc(2e10)
    slow_now["probe"] = {"taken_at": 0.0, "load_per_core": 0.0, "quick_flops_per_s": 2e9}
    monkeypatch.setattr(cpu, "_quick_rate", lambda: 1e9)  # half the rate: busy now
    assert cpu._recheck(slow_now)
    assert "busy now" in capsys.readouterr().err
    monkeypatch.setattr(cpu, "_quick_rate", lambda: pytest.fail("a hand-written cache is trusted"))
    assert cpu._recheck(fake_cpu_doc(2e10))


def test_measure_writes_a_trace_that_compare_and_calibrate_read(cached_cpu, tmp_path, capsys):
    """End to end on this CPU: a real run's profiler trace, compared and fitted."""
    x = torch.empty(4, 3, 16, 16, device="meta")
    trace = tmp_path / "run.json.gz"
    r = dlperf.measure(small_cnn(), x, device="cpu", training=True, steps=2, trace_out=trace)
    # the run steps fused AdamW where this PyTorch has it, and is priced so
    assert r.optimizer == adamw_as_run("cpu")
    ran = {"optimizer": r.optimizer}
    c = dlperf.compare(small_cnn(), trace, inputs=x, precision="fp32", **ran)
    assert c.notes == []
    if r.optimizer == "adamw-fused":  # priced as torch.optim's default, the note says so
        (note,) = dlperf.compare(small_cnn(), trace, inputs=x, precision="fp32").notes
        assert "--optimizer adamw-fused" in note
    assert c.gpu == "cpu" and c.steps == 2  # a trace without kernels is the CPU's
    contractions = [r for r in c.rows if r.category == "gemm"]
    assert len(contractions) == 7  # as measure matches them, above
    assert all(r.measured_s > 0 for r in c.rows)
    assert c.mapped_share == pytest.approx(1.0)  # a CPU step is ops or the host between them
    out = tmp_path / "cpu.toml"
    spec = dlperf.calibrate_trace(trace, small_cnn(), out, inputs=x, precision="fp32", **ran)
    assert spec.kind == "cpu" and spec.calibration.source == str(trace)
    assert "host_gap_s" in spec.calibration.fitted
    # the calibrated spec prices the run it was fitted on at the trace's own step
    step = dlperf.analyze(small_cnn(), x, gpu=str(out), precision="fp32", **ran).time_s
    assert step == pytest.approx(c.measured_step_s, rel=0.02)
    assert main(["gpus", "--spec", str(out)]) == 0
    assert "host_gap_s" in capsys.readouterr().out


def test_math_path_attention_backward_is_found_through_autograd(cached_cpu, tmp_path):
    """On a CPU in training with dropout SDPA runs its math path: its backward
    is autograd's nodes of the forward's ops, linked by sequence number."""
    model = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=512"
    trace = tmp_path / "gpt2.json"
    dlperf.measure(model, batch=2, seq_len=32, device="cpu", steps=2, trace_out=trace)
    c = dlperf.compare(model, trace, batch=2, seq_len=32, precision="fp32")
    backward = [r for r in c.rows if r.op == "dlperf.attention_backward.default"]
    assert len(backward) == 1 and backward[0].measured_s > 0
    assert not any("attention" in r["op"] for r in c.unmatched_rows)


class _SelfAttention(nn.Module):
    """One causal self-attention through F.scaled_dot_product_attention."""

    def __init__(self, width: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, x):
        b, n, width = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        out = nn.functional.scaled_dot_product_attention(*qkv, is_causal=True)
        return out.transpose(1, 2).reshape(b, n, width)


def test_measure_puts_the_measured_sdpa_calls_beside_the_fused_attention_rows(cached_cpu):
    """dlperf prices SDPA as its own fused rows (dlperf.attention and its
    backward); the run's calls are aten's (on this CPU scaled_dot_product_attention,
    over _scaled_dot_product_flash_attention_for_cpu, and the latter's backward).
    measure pairs them as compare does (trace_match), where it matched aten
    names only and left both rows unmeasured."""
    x = torch.empty(2, 32, 16, device="meta")
    report = dlperf.measure(_SelfAttention(), x, device="cpu", training=True, steps=2)
    attention = {o["op"]: o for o in report.ops if "attention" in o["op"]}
    assert attention.keys() == {"dlperf.attention.default", "dlperf.attention_backward.default"}
    for op in attention.values():
        assert op["predicted_time_s"] > 0 and op["measured_time_s"] > 0, op
    assert attention["dlperf.attention.default"]["phase"] == "forward"
    assert attention["dlperf.attention_backward.default"]["phase"] == "backward"
    assert report.categories["contraction"]["measured_time_s"] > 0


class _TensorsOffDevice(TorchDispatchMode):
    """Every op that reads a tensor of more than one element off `device` (a
    CPU scalar is what CUDA ops take beside their own tensors)."""

    def __init__(self, device: str):
        super().__init__()
        self.device, self.off = device, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.device.type != self.device:
                self.off.append((str(func), tuple(t.shape), str(t.device)))
        return func(*args, **kwargs)


def test_the_measured_step_keeps_every_tensor_on_its_device():
    """A classifier's training step (its loss target included) runs on the
    device asked for: on meta here, as it runs on cuda (a target left on the
    CPU failed resnet50's step on an H100)."""
    model = materialize(small_cnn(), "meta")
    data = real_inputs(torch.empty(4, 3, 16, 16, device="meta"), "meta")
    step = _step_fn(model, data, True, None, "meta", "adamw")
    with _TensorsOffDevice("meta") as seen:
        loss = step()
    assert loss.device.type == "meta"
    assert seen.off == []
    assert all(p.grad is not None and p.grad.is_meta for p in model.parameters())


def test_a_token_models_labels_go_to_the_device_with_its_ids():
    """An hf: model's inputs (ids and their labels) are all made on the device."""
    loaded = resolve_model("hf:gpt2:layers=1,hidden=64,heads=2,vocab=512", batch=2, seq_len=8)
    assert "labels" in loaded.inputs
    data = real_inputs(loaded.inputs, "meta")
    assert data.keys() == loaded.inputs.keys()
    assert all(t.is_meta for t in data.values())


@pytest.mark.parametrize(
    "cc, family",
    [
        ((5, 2), "maxwell"),
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 7), "ampere"),
        ((8, 9), "ada"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((10, 3), "blackwell"),
        ((12, 0), "blackwell"),
        ((3, 7), None),
    ],
)
def test_a_compute_capability_names_its_family(cc, family):
    assert architecture_of(*cc) == family


def _h100_props(**changes):
    """What torch.cuda.get_device_properties(0) says of the H100 the run found."""
    facts = dict(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        clock_rate=1980000,  # kHz
        total_memory=85017493504,
        L2_cache_size=52428800,
        uuid="5d3c0a4e-0000-1111-2222-333344445555",
    )
    return SimpleNamespace(**(facts | changes))


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CUDA device for calibrate's probe with no GPU: its properties are set
    by the test (`fake_cuda(props)`), its measured rates are the H100's."""
    rates = {"fp32": 51.9e12, "fp16": 733e12, "bf16": 769.4e12}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(calibrate.probe, "matmul_flops_per_s", lambda dtype, *a, **k: rates[dtype])
    monkeypatch.setattr(calibrate.probe, "stream_bandwidth_bytes_per_s", lambda *a, **k: 3.04e12)
    monkeypatch.setattr(calibrate.probe, "call_latency_s", lambda *a, **k: 7.4e-6)
    monkeypatch.setattr(
        calibrate, "elementwise_sweep", lambda device: [(12.0 * n, 8e-6) for n in (2**10, 2**20)]
    )

    def use(props):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)

    return use


def test_cuda_calibration_writes_the_gpus_family_and_clock(fake_cuda, tmp_path, capsys):
    """An H100 is Hopper (compute capability 9.0) at its 1980 MHz, and each
    per-clock rate written is the measured rate at that clock."""
    fake_cuda(_h100_props())
    out = tmp_path / "calibrated.toml"
    assert main(["calibrate", "--device", "cuda", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    text = out.read_text()
    assert 'architecture = "hopper"' in text and 'compute_capability = "9.0"' in text
    spec = load_spec_file(out)
    assert spec.architecture == "hopper" and spec.compute_capability == "9.0"
    assert spec.boost_clock_mhz == 1980.0
    assert any("clock_rate" in source for source in spec.sources)
    for dtype in ("fp32", "fp16", "bf16"):
        peak = spec.peak_flops_per_s(dtype)
        assert spec.computed_peak_flops_per_s(dtype) == pytest.approx(peak)
    assert spec.unit("bf16").macs_per_clock_per_sm == pytest.approx(769.4e12 / (2 * 132 * 1.98e9))


def test_cuda_calibration_reads_the_clock_from_nvidia_smi_without_torchs(fake_cuda, monkeypatch):
    fake_cuda(_h100_props(clock_rate=0, major=8, minor=6, name="NVIDIA RTX A6000"))
    ran = []

    def nvidia_smi(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="1800\n", stderr="")

    monkeypatch.setattr(calibrate.subprocess, "run", nvidia_smi)
    doc = calibrate.calibrate_device("cuda")
    assert doc["architecture"] == "ampere" and doc["compute_capability"] == "8.6"
    assert doc["boost_clock_mhz"] == 1800.0
    assert "boost clock: nvidia-smi clocks.max.sm" in doc["sources"]
    (cmd,) = ran
    assert cmd[:3] == ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]
    assert cmd[3] == "--id=GPU-5d3c0a4e-0000-1111-2222-333344445555"
    rate = doc["math"]["bf16"]
    assert rate["macs_per_clock_per_sm"] * 2 * 132 * 1.8e9 == pytest.approx(
        rate["peak_flops_per_s"]
    )


def test_cuda_calibration_without_a_clock_says_so(fake_cuda, monkeypatch):
    """No clock from torch and no nvidia-smi: an error, not a made-up 1000 MHz."""
    fake_cuda(_h100_props(clock_rate=None))

    def no_nvidia_smi(cmd, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")

    monkeypatch.setattr(calibrate.subprocess, "run", no_nvidia_smi)
    with pytest.raises(DlperfError, match="cannot read the SM clock of NVIDIA H100.*nvidia-smi"):
        calibrate.calibrate_device("cuda")


def test_cuda_calibration_refuses_a_gpu_older_than_every_family(fake_cuda):
    fake_cuda(_h100_props(major=3, minor=7, name="Tesla K80"))
    with pytest.raises(DlperfError, match="Tesla K80 has compute capability 3.7"):
        calibrate.calibrate_device("cuda")


# The GEMM, convolution and attention kernels (and the look-alikes) of the H100's
# bf16 Llama training step (bench/measured/h100-2026-11-28/llama.json.gz, 3 steps),
# launches of each.
H100_LLAMA_KERNELS = {
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": 75,
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT": 72,
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT": 60,
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT": 27,
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NTT": 15,
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT": 12,
    # the rotary embedding's fp32 matmul, on the SMs' FMA units
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
    "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)": 3,
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1"
    "_cga1x1x1_kernel0_0": 12,
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1"
    "_cga1x1x1_kernel0_0": 12,
    # cuDNN attention's helpers: no matrix product ("convert" is no convolution)
    "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int)": 12,
    "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*)": 12,
    "void cudnn::fusion::fmha_reduce_head<true>(void const*, void*, unsigned int)": 24,
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda()#3}>": 63,
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::FusedOptimizerTensorListMetadata<4>>": 276,
}


def test_hopper_kernels_are_counted_on_tensor_cores():
    """A bf16 step on an H100 ran its GEMMs in cuBLAS's nvjet kernels and its
    attention in cuDNN's wgmma kernels, all on Tensor Cores, but the rotary
    embedding's fp32 SIMT GEMM (the rule said 3 of 15: it took the SIMT GEMM
    for Tensor Cores, cuDNN's convert_dq for a convolution, and missed nvjet)."""
    names = [name for name, n in H100_LLAMA_KERNELS.items() for _ in range(n)]
    usage = tensor_core_usage(names)
    assert usage == {
        "gemm_kernels": 264,
        "tensor_core_kernels": 261,
        "attention_kernels": 24,
        "attention_tensor_core_kernels": 24,
    }
    assert tensor_core_line(usage) == (
        "Tensor Cores: 261 of 264 GEMM/convolution kernels, 24 of 24 attention kernels"
    )


# Names from the A100 and V100 traces in ../shared/data, and, for kernels no
# stored trace ran, names of their libraries' patterns (cuBLAS on Blackwell,
# CUTLASS 3, FlashAttention-2, PyTorch's memory-efficient attention).
@pytest.mark.parametrize(
    "name, kind, tensor_cores",
    [
        ("nvjet_sm100_tst_64x32_64x16_2x1_2cta_h_bz_TNT", "gemm", True),
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", True),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
            "gemm",
            True,
        ),
        (
            "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1",
            "gemm",
            True,
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(...)",
            "gemm",
            True,
        ),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "gemm", True),
        ("ampere_sgemm_128x64_nn", "gemm", False),
        ("volta_sgemm_64x64_nt", "gemm", False),
        ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "gemm", False),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int)", "gemm", False),
        (
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16>(...)",
            "gemm",
            False,
        ),
        (
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16>",
            "gemm",
            False,
        ),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false>>",
            "attention",
            True,
        ),
        (
            "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>",
            "attention",
            True,
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)",
            "attention",
            True,
        ),
        (
            "fmha_cutlassF_f32_aligned_64x64_rf_sm50(PyTorchMemEffAttention::AttentionKernel)",
            "attention",
            False,
        ),
        ("void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128>>", None, False),
        ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", None, False),
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", None, False),
        ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*)", None, False),
    ],
)
def test_a_kernel_name_says_its_matrix_work_and_its_units(name, kind, tensor_cores):
    assert matrix_kernel(name) == kind
    assert tensor_core_kernel(name) is tensor_cores
