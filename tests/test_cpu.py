"""The CPU as a device: the probe, its cache, and the timing harness."""

import json

import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.hardware import cpu
from dlperf.hardware.timing import time_callable
from tests.fake_cpu import fake_cpu_doc


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


def test_cpu_probe_is_measured_once_then_cached(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "PROBE_BUDGET_S", 0.5)  # every part keeps to its share of it
    spec = dlperf.gpu("cpu")
    assert spec.kind == "cpu" and spec.id == "cpu"
    assert spec.peak_flops_per_s("fp32") > 1e8  # any machine does 0.1 GFLOP/s
    assert spec.memory_bandwidth_bytes_per_s > 1e8
    assert spec.efficiency.eager_call_overhead_s >= 0
    err = capsys.readouterr().err
    assert "measuring this CPU once" in err and "fp32 matmul" in err  # progress while it runs
    cached = list(tmp_path.glob("cpu-*.json"))
    assert len(cached) == 1
    json.loads(cached[0].read_text())  # plain JSON, never a pickle

    def no_probe():
        raise AssertionError("probed again instead of reading the cache")

    monkeypatch.setattr(cpu, "probe_cpu", no_probe)
    again = dlperf.gpu("local")
    assert again.peak_flops_per_s("fp32") == spec.peak_flops_per_s("fp32")
    assert capsys.readouterr().err == ""


def test_timing_budget_stops_sampling_after_one_sample():
    # budget 0: the first sample already used it up, so 1 of the 5 repeats is taken
    m = time_callable(lambda: None, warmup=0, repeats=5, budget_s=0.0)
    assert len(m.samples_s) == 1


def _stub_probes(monkeypatch, asked):
    from dlperf.hardware import probe

    def matmul(dtype, budget_s, sizes):
        asked[dtype] = sizes
        return 1e11

    monkeypatch.setattr(probe, "matmul_flops_per_s", matmul)
    # 20 GB/s from DRAM, 80 GB/s from buffers that fit in the cache
    monkeypatch.setattr(
        probe,
        "stream_bandwidth_bytes_per_s",
        lambda tensor_bytes, budget_s: 2e10 if tensor_bytes >= 2**26 else 8e10,
    )
    monkeypatch.setattr(cpu, "_last_level_cache_bytes", lambda: 8 * 2**20)
    monkeypatch.setattr(probe, "call_latency_s", lambda budget_s: 2e-6)
    monkeypatch.setattr(probe, "first_touch_bytes_per_s", lambda budget_s: 3e9)
    monkeypatch.setattr(probe, "random_elements_per_s", lambda budget_s: 1.5e8)
    # the probe's causal attention (4 x 8 heads, 256 x 256, head size 64) keeps 2 x 32 x
    # 256 x 256 x 128 / 2 = 268,435,456 FLOPs forward, 2.5x that backward, of twice as
    # many computed (CPU flash, 256 keys < its 512-key blocks): at 5e10 and 4e10 FLOP/s
    kept = 268_435_456
    monkeypatch.setattr(
        probe, "attention_seconds", lambda budget_s: (2 * kept / 5e10, 2 * 2.5 * kept / 4e10)
    )
    monkeypatch.setattr(probe, "eager_step_s_per_op", lambda budget_s: 12e-6)
    # rates at c/(c + 64) of the 1e11 fp32 peak: 27/91 and 288/352
    points = [(27.0, 1e11 * 27 / 91), (288.0, 1e11 * 288 / 352)]
    monkeypatch.setattr(probe, "conv_flops_per_s", lambda budget_s: points)
    return probe


def test_probe_document_from_its_parts(monkeypatch):
    asked = {}
    probe = _stub_probes(monkeypatch, asked)
    monkeypatch.setattr(probe, "native_bf16", lambda: False)
    doc = cpu.probe_cpu(progress=lambda line: None)
    # no bf16 units: one small size says how slow the emulation is
    assert asked["bf16"] == (probe.EMULATED_BF16_SIZE,)
    assert asked["fp32"] == probe.MATMUL_SIZES
    eff = doc["efficiency"]
    assert eff["kernel_latency_s"] == 2e-6
    # 12 us per op of a tiny eager step, of which the 2 us kernel latency is modelled already
    assert eff["eager_call_overhead_s"] == pytest.approx(10e-6)
    assert eff["conv_reduction_knee"] == 64.0
    assert eff["llc_streaming_speedup"] == 4.0  # 80 / 20 GB/s
    assert eff["first_touch_bytes_per_s"] == 3e9
    assert eff["random_elements_per_s"] == 1.5e8
    # of the 1e11 matmul rate
    assert eff["attention_flash_forward_efficiency"] == pytest.approx(0.5)
    assert eff["attention_flash_backward_efficiency"] == pytest.approx(0.4)
    assert doc["l2_cache_bytes"] == 8 * 2**20 and doc["memory_bandwidth_bytes_per_s"] == 2e10
    assert cpu.spec_from_dict(doc).efficiency.conv_reduction_knee == 64.0


def test_native_bf16_is_probed_at_every_size(monkeypatch):
    asked = {}
    probe = _stub_probes(monkeypatch, asked)
    monkeypatch.setattr(probe, "native_bf16", lambda: True)
    cpu.probe_cpu(progress=lambda line: None)
    assert asked["bf16"] == probe.MATMUL_SIZES


def test_conv_knee_fit_recovers_a_known_knee():
    peak = 2e11
    points = [(c, peak * c / (c + 32.0)) for c in (27.0, 147.0, 576.0)]
    assert cpu.conv_reduction_knee(points, peak) == 32.0
    # convolutions at the matmul rate: no knee
    assert cpu.conv_reduction_knee([(27.0, peak), (576.0, peak)], peak) == 0.0


def _cpu_doc(**efficiency) -> dict:
    # bandwidth 1e13 B/s so that every convolution is math-bound
    return fake_cpu_doc(1e13, **efficiency)


def test_eager_overhead_is_added_per_call_on_a_cpu_only():
    import dataclasses

    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.empty(4, 64, device="meta")
    base = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0))
    slow = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=1e-4))
    a = dlperf.analyze(model, x, gpu=base, precision="fp32")
    b = dlperf.analyze(model, x, gpu=slow, precision="fp32")
    assert len(a.rows) == len(b.rows) > 0
    for ra, rb in zip(a.rows, b.rows, strict=True):
        assert rb.time_s - ra.time_s == pytest.approx(1e-4 * max(1, ra.kernels))
    # a GPU's host runs ahead of its kernels: the eager term never reaches its predictions
    gpu = dlperf.gpu("a100")
    eff = dataclasses.replace(gpu.efficiency, eager_call_overhead_s=1.0)
    c = dlperf.analyze(model, x, gpu=gpu, precision="fp32")
    d = dlperf.analyze(model, x, gpu=dataclasses.replace(gpu, efficiency=eff), precision="fp32")
    assert [r.time_s for r in c.rows] == [r.time_s for r in d.rows]


def test_conv_knee_slows_a_short_reduction_on_a_cpu():
    import torch
    from torch import nn

    from dlperf.kernels.gemm import predict_many

    conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
    x = torch.empty(2, 3, 32, 32, device="meta")
    doc = _cpu_doc(eager_call_overhead_s=0.0)
    base = cpu.spec_from_dict(doc)
    # knee 27 = C*R*S of this convolution: it runs at 27/(27+27), half the matmul rate
    knee = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0, conv_reduction_knee=27.0))
    a = dlperf.analyze(conv, x, gpu=base, precision="fp32", training=False)
    b = dlperf.analyze(conv, x, gpu=knee, precision="fp32", training=False)
    (ra,), (rb,) = [[r for r in an.rows if r.family == "conv"] for an in (a, b)]
    g = ra.gemms[0]
    math_s = predict_many(g.m, g.n, g.k, g.batch, base, "fp32").math_time_s.item()
    # half the rate: the math time once more (memory time is negligible at 10 TB/s)
    assert rb.time_s - ra.time_s == pytest.approx(math_s, rel=1e-6)


def test_cached_share_of_a_small_op_streams_faster_on_a_cpu():
    import torch
    from torch import nn

    def spec(speedup: float, cache_bytes: int):
        doc = _cpu_doc(eager_call_overhead_s=0.0, llc_streaming_speedup=speedup)
        doc["memory_bandwidth_bytes_per_s"] = 1e10  # memory-bound: 2 MiB take 210 us
        doc["l2_cache_bytes"] = cache_bytes
        return cpu.spec_from_dict(doc)

    def relu_s(device) -> float:
        x = torch.empty(2**18, device="meta")  # 1 MiB of fp32: relu reads and writes 2 MiB
        (row,) = dlperf.analyze(nn.ReLU(), x, gpu=device, precision="fp32", training=False).rows
        return row.time_s - device.efficiency.kernel_latency_s

    dram_s = relu_s(spec(1.0, 8 * 2**20))
    # 2 MiB of a 1 MiB cache: none of it can be there, so the DRAM time
    assert relu_s(spec(4.0, 2**20)) == pytest.approx(dram_s)
    # an 8 MiB cache holds 1 - 2/8 = 3/4 of the bytes, streamed 4x faster: 1/4 + 3/16 of the time
    assert relu_s(spec(4.0, 8 * 2**20)) == pytest.approx(dram_s * 7 / 16)


def test_a_large_new_tensor_pays_for_its_fresh_pages_on_a_cpu_only():
    import dataclasses

    import torch
    from torch import nn

    from dlperf.kernels.pricing import CPU_FRESH_PAGES_BYTES

    # 1024 x 16384 fp32 out of the linear layer: 64 MiB, above glibc's 32 MiB mmap threshold
    model = nn.Linear(1024, 16384, bias=False)
    x = torch.empty(1024, 1024, device="meta")
    out_bytes = 1024 * 16384 * 4
    assert out_bytes >= CPU_FRESH_PAGES_BYTES
    base = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0))
    faulting = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0, first_touch_bytes_per_s=1e9))
    a = dlperf.analyze(model, x, gpu=base, precision="fp32", training=False)
    b = dlperf.analyze(model, x, gpu=faulting, precision="fp32", training=False)
    (ra,), (rb,) = a.rows, b.rows
    assert rb.time_s - ra.time_s == pytest.approx(out_bytes / 1e9)  # 67.1 ms at 1 GB/s
    # a small output (1024 x 1024: 4 MiB) comes from malloc's heap: no fault
    small = nn.Linear(1024, 1024, bias=False)
    c = dlperf.analyze(small, x, gpu=base, precision="fp32", training=False)
    d = dlperf.analyze(small, x, gpu=faulting, precision="fp32", training=False)
    assert [r.time_s for r in c.rows] == [r.time_s for r in d.rows]
    # a GPU's caching allocator reuses its blocks: the rate never reaches it
    gpu = dlperf.gpu("a100")
    eff = dataclasses.replace(gpu.efficiency, first_touch_bytes_per_s=1e9)
    e = dlperf.analyze(model, x, gpu=gpu, precision="fp32", training=False)
    f = dlperf.analyze(model, x, gpu=dataclasses.replace(gpu, efficiency=eff), precision="fp32",
                       training=False)  # fmt: skip
    assert [r.time_s for r in e.rows] == [r.time_s for r in f.rows]


def test_fresh_pages_are_new_storages_only():
    import dataclasses

    import torch

    from dlperf.analysis import _fresh_page_bytes
    from dlperf.tracing.events import OpEvent, TensorMeta

    big = TensorMeta((2**24,), torch.float32, (1,))  # 64 MiB
    small = TensorMeta((2**20,), torch.float32, (1,))  # 4 MiB

    def op(reads, writes, out):
        return OpEvent("aten.x.default", (), {}, out, "", "forward", reads=reads, writes=writes)

    def recompute(reads, writes, out):
        return dataclasses.replace(op(reads, writes, out), phase="recompute")

    events = [
        op((1,), (2,), (big,)),  # a new 64 MiB tensor: fresh
        op((2,), (2,), (big,)),  # in place into it (or a view of it): its storage, not
        op((2,), (3,), (small,)),  # new but under the threshold: not
        op((3,), (2,), (big,)),  # an earlier storage written again: not
        op((2,), (4, 5), (big, big)),  # two new ones
        op((6,), (7,), (big,)),  # a first write into one an unrecorded empty_like made
        recompute((1,), (2,), (big,)),  # recomputed: checkpointing freed it after forward
        recompute((2,), (2,), (big,)),  # but not an in-place write
        OpEvent("dlperf.module", (), {}, (big,), "", "forward"),  # no storages recorded
    ]
    assert _fresh_page_bytes(events) == [2**26, 0, 0, 0, 2 * 2**26, 2**26, 2**26, 0, 0]


def test_dropout_draws_its_mask_at_the_cpus_random_number_rate():
    import dataclasses

    import torch
    from torch import nn

    # dropout in training draws one random number per element (bernoulli_): on a CPU
    # at the probed rate, 2**20 elements at 1e8 a second = 10.5 ms more than streaming
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Dropout(0.1))
    x = torch.empty(1024, 1024, device="meta")
    base = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0))
    slow = cpu.spec_from_dict(_cpu_doc(eager_call_overhead_s=0.0, random_elements_per_s=1e8))

    def mask_s(spec) -> float:
        a = dlperf.analyze(model, x, gpu=spec, precision="fp32")
        (row,) = [r for r in a.rows if r.op.startswith("aten.bernoulli")]
        return row.time_s

    assert mask_s(slow) - mask_s(base) == pytest.approx(2**20 / 1e8)
    # a GPU's generator keeps up with memory: the rate never reaches it
    gpu = dlperf.gpu("a100")
    fast = dataclasses.replace(
        gpu, efficiency=dataclasses.replace(gpu.efficiency, random_elements_per_s=1e3)
    )
    a = dlperf.analyze(model, x, gpu=gpu, precision="fp32")
    b = dlperf.analyze(model, x, gpu=fast, precision="fp32")
    assert [r.time_s for r in a.rows] == [r.time_s for r in b.rows]
