"""The seeds' roofline numbers, with the arithmetic in the comments."""

import pytest

import dlperf
from dlperf.kernels import roofline


def gemm_intensity_fp16(m, n, k):
    # 2MNK FLOPs over 2 bytes x (MK + NK + MN) elements
    return roofline.arithmetic_intensity(2 * m * n * k, 2 * (m * k + n * k + m * n))


def test_seed_gemm_intensities():
    # 8192x128x8192: 2*8192*128*8192 / (2*(8192*8192 + 128*8192 + 8192*128)) = 124.1
    assert gemm_intensity_fp16(8192, 128, 8192) == pytest.approx(124.1, abs=0.05)
    # 8192^3: 8192/3 = 2730.7
    assert gemm_intensity_fp16(8192, 8192, 8192) == pytest.approx(2730.7, abs=0.05)


def test_linear_layer_intensities_on_v100():
    ridge = dlperf.gpu("v100").ridge_ops_per_byte("fp16")  # 138.9
    # 4096 outputs, 1024 inputs, batch 512: M=512, N=4096, K=1024
    # 2*512*4096*1024 / (2*(512*1024 + 1024*4096 + 512*4096)) = 315.1
    big = gemm_intensity_fp16(512, 4096, 1024)
    assert big == pytest.approx(315.1, abs=0.05)
    assert big > ridge
    # batch 1: 4096*1024 / (1024 + 4096*1024 + 4096) = 0.999
    small = gemm_intensity_fp16(1, 4096, 1024)
    assert small == pytest.approx(1.0, abs=0.01)
    assert small < ridge


def test_ridge_and_attainable():
    assert roofline.ridge_point(125e12, 900e9) == pytest.approx(138.9, abs=0.05)
    # below the ridge the roof is intensity x bandwidth, above it the peak
    assert roofline.attainable_flops_per_s(10, 125e12, 900e9) == pytest.approx(9e12)
    assert roofline.attainable_flops_per_s(1000, 125e12, 900e9) == 125e12


def test_limiter():
    assert roofline.limiter(2.0, 1.0, 0.5) == "math"
    assert roofline.limiter(1.0, 2.0, 0.5) == "memory"
    assert roofline.limiter(1.0, 2.0, 3.0) == "latency"


def test_streaming_time_has_a_small_size_plateau():
    spec = dlperf.gpu("a100")
    tiny = roofline.streaming_time_s(1e3, spec)
    tinier = roofline.streaming_time_s(1e2, spec)
    # both sit on the latency plateau: a 10x smaller copy is not 10x faster
    assert tinier > 0.9 * tiny
    big = roofline.streaming_time_s(1e9, spec)
    bigger = roofline.streaming_time_s(2e9, spec)
    assert bigger / big == pytest.approx(2.0, rel=0.01)  # proportional when large
