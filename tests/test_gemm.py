"""The GEMM model against the seeds' worked examples."""

import numpy as np
import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.kernels.gemm import predict_many
from dlperf.kernels.roofline import limiter
from tests.fake_cpu import fake_cpu_doc

JSON_KEYS = {
    "m",
    "n",
    "k",
    "batch",
    "dtype",
    "gpu",
    "flops",
    "bytes",
    "arithmetic_intensity",
    "ridge_ops_per_byte",
    "bound",
    "time_s",
    "achieved_flops_per_s",
    "fraction_of_peak",
    "tile",
    "tiles",
    "waves",
    "tile_efficiency",
    "wave_efficiency",
    "alignment",
    "notes",
}


def test_seed_memory_and_math_bound_gemms_on_v100():
    skinny = dlperf.gemm(8192, 128, 8192, dtype="fp16", gpu="v100")
    # The guide's example: 2*8192*128*8192 FLOPs over 2*(8192*8192 + 8192*128 + 8192*128)
    # bytes = 124.1 FLOPs/B, below V100's datasheet ridge 125e12 / 900e9 = 138.9.
    assert round(skinny.arithmetic_intensity, 1) == 124.1
    assert round(skinny.ridge_ops_per_byte, 1) == 138.9
    # The verdict is the one rule: the term that sets the predicted time.
    assert skinny.bound == limiter(skinny.math_time_s, skinny.memory_time_s, skinny.latency_s)
    assert any("datasheet ridge 138.9" in note for note in skinny.notes)
    square = dlperf.gemm(8192, 8192, 8192, dtype="fp16", gpu="v100")
    assert int(square.arithmetic_intensity) == 2730
    assert square.bound == "math"
    assert set(square.to_dict()) >= JSON_KEYS


def test_flops_and_bytes():
    r = dlperf.gemm(64, 32, 16, dtype="fp16", gpu="a100", batch=3)
    assert r.flops == 2 * 3 * 64 * 32 * 16  # 196608
    assert r.bytes == 3 * 2 * (64 * 16 + 16 * 32 + 64 * 32)  # 21504


def _force(m, n, k, tile, gpu="a100", dtype="fp16"):
    spec = dlperf.gpu(gpu)
    out = predict_many(m, n, k, 1, spec, dtype, tile_shapes=(tile,), split_factors=(1,))
    return out.rows()[0]._asdict()


def test_wave_quantization_on_a100():
    # 256x128 tiles, one per SM: 108 tiles fill one wave of 108 SMs exactly.
    full = _force(256 * 108, 128, 4096, (256, 128))
    assert full["tiles"] == 108 and full["waves"] == 1
    assert full["wave_efficiency"] == pytest.approx(1.0)
    # One more tile needs a second wave that runs a single tile: 109 / 216 = 0.505.
    over = _force(256 * 109, 128, 4096, (256, 128))
    assert over["tiles"] == 109 and over["waves"] == 2
    assert over["wave_efficiency"] == pytest.approx(109 / 216)
    # ... and the math takes about twice as long for 0.9% more work.
    assert over["math_time_s"] / full["math_time_s"] == pytest.approx(2.0, rel=0.02)


def test_tile_quantization_one_past_a_multiple():
    exact = _force(256, 128, 4096, (256, 128))
    past = _force(257, 128, 4096, (256, 128))
    # M = 257 needs ceil(257/256) = 2 tile rows: the second computes 1 useful row of 256.
    assert past["tiles"] == 2 * exact["tiles"]
    assert past["tile_efficiency"] == pytest.approx(257 / 512)
    assert exact["tile_efficiency"] == 1.0


def test_larger_tiles_run_more_efficiently_per_flop():
    # same square problem, each priced with one tile shape (no quantization: all divide 4096)
    shapes = [(256, 128), (128, 128), (64, 64)]
    times = {t: _force(4096, 4096, 4096, t)["math_time_s"] for t in shapes}
    assert times[(256, 128)] < times[(128, 128)] < times[(64, 64)]


def test_k_divisible_by_8_is_fastest_on_v100_fp16():
    # Seed figure "Optimality": M = N = 1024, K = 1008..1024, FP16, V100.
    times = {
        k: dlperf.gemm(1024, 1024, k, dtype="fp16", gpu="v100").time_s for k in range(1008, 1025)
    }
    for k, t in times.items():
        if k % 8:
            next_aligned = k + (8 - k % 8)
            assert t > times[next_aligned], (k, next_aligned)
    assert min(times, key=times.get) % 8 == 0


def test_alignment_verdicts_and_notes():
    r = dlperf.gemm(1024, 1024, 1020, dtype="fp16", gpu="v100")
    assert r.alignment == {"m": "ok", "n": "ok", "k": "not a multiple of 8"}
    assert any("K=1020 is not a multiple of 8" in note for note in r.notes)
    # On A100, 8 is enough for Tensor Cores but 64 is best.
    a = dlperf.gemm(1024, 1024, 1032, dtype="fp16", gpu="a100")
    assert a.alignment["k"] == "not a multiple of 64"
    # CUDA-core math has no Tensor Core alignment rule.
    f = dlperf.gemm(1024, 1024, 1021, dtype="fp32", gpu="a100")
    assert set(f.alignment.values()) == {"ok"}
    assert any("CUDA cores" in note for note in f.notes)


def test_a_batch_one_gemm_is_memory_bound():
    # issue 21, item 3: 1 x 4096 x 4096 in fp16 does 2 x 4096 x 4096 = 33.6 MFLOP over
    # 2 x (4096 x 4096 + 2 x 4096) = 33.6 MB: 1 FLOP/B, 150x below the A100's ridge; it reads
    # its weights and nothing else matters (it was labelled math: the padded tiles' math)
    r = dlperf.gemm(1, 4096, 4096, dtype="fp16", gpu="a100")
    assert round(r.arithmetic_intensity, 2) == 1.0
    assert r.bound == "memory"
    assert r.bound == limiter(r.math_time_s, r.memory_time_s, r.latency_s)


def test_tiny_gemm_is_latency_bound():
    r = dlperf.gemm(8, 8, 8, dtype="fp16", gpu="a100")
    assert r.bound == "latency"
    assert r.time_s >= dlperf.gpu("a100").efficiency.kernel_latency_s


def test_split_k_for_skinny_output_with_long_k():
    # 128x128 output is one or a few tiles; K = 65536 gives each of them a long serial loop.
    r = dlperf.gemm(128, 128, 65536, dtype="fp16", gpu="a100")
    assert r.split_k > 1
    plain = _force(128, 128, 65536, (128, 128))
    assert r.time_s < plain["time_s"]


def test_time_grows_with_work_and_stays_below_peak():
    small = dlperf.gemm(2048, 2048, 2048, dtype="bf16", gpu="h100")
    big = dlperf.gemm(8192, 8192, 8192, dtype="bf16", gpu="h100")
    assert big.time_s > small.time_s
    assert 0 < big.fraction_of_peak <= 1.0


def test_predict_many_matches_single_calls():
    spec = dlperf.gpu("t4")
    ms, ns, ks = np.array([64, 1000, 4096]), np.array([64, 333, 4096]), np.array([64, 512, 1024])
    many = predict_many(ms, ns, ks, np.ones(3, dtype=int), spec, "fp16")
    for i in range(3):
        one = dlperf.gemm(int(ms[i]), int(ns[i]), int(ks[i]), dtype="fp16", gpu="t4")
        assert many.time_s[i] == pytest.approx(one.time_s)


@pytest.mark.parametrize("bad", [0, -4, 2.5, True])
def test_bad_sizes(bad):
    with pytest.raises(DlperfError, match="must be a positive whole number"):
        dlperf.gemm(bad, 16, 16)


def test_unknown_dtype():
    with pytest.raises(DlperfError, match="unknown dtype 'fp13'"):
        dlperf.gemm(16, 16, 16, dtype="fp13")


def test_cpu_gemm_uses_the_roofline(monkeypatch, tmp_path):
    from dlperf.hardware import cpu

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    fake = fake_cpu_doc(1e10, memory_bytes=2**30)
    monkeypatch.setattr(cpu, "probe_cpu", lambda: fake)
    r = dlperf.gemm(1000, 1000, 1000, dtype="fp32", gpu="cpu")
    # 2e9 FLOPs / 1e11 FLOP/s = 20 ms, plus 1 us latency
    assert r.time_s == pytest.approx(0.02 + 1e-6)
    assert r.bound == "math" and r.tile == "none"
