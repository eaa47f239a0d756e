"""Hopper and Blackwell kernels as they run (issue 19): the GEMM ceiling, alignment
on N and K only, fixed costs back to back, cold against warm streaming, clocks
under a power cap, the attention kernels of the installed stack, weight-only
quantized GEMMs and the new catalogue entries.

Expected values are derived from the spec data (read, not restated) with the
arithmetic in the comments.
"""

import math
import subprocess
import sys

import numpy as np
import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.hardware.clocks import power_cap_fraction
from dlperf.hardware.spec import SPECS_DIR
from dlperf.kernels.attention import attention_efficiency, choose_backend, cudnn_first
from dlperf.kernels.fixed_costs import gap_s, streaming_latency_s
from dlperf.kernels.gemm_tiles import predict_many
from dlperf.kernels.host import issue_timeline
from dlperf.kernels.quantized import bytes_per_weight
from dlperf.kernels.roofline import streaming_terms
from dlperf.ops.cost import AttentionShape
from tests.test_fused_attention import shape
from tests.test_host import Row

H100 = dlperf.gpu("h100")
A100 = dlperf.gpu("a100")


# -- GEMMs ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a100", "h100", "gh200", "b200", "h100-nvl", "h200"])
def test_no_gemm_is_predicted_above_its_architecture_ceiling(name):
    spec = dlperf.gpu(name)
    sizes = np.array([1024, 2048, 4096, 8192, 16384, 32768])
    m, n, k = (g.ravel() for g in np.meshgrid(sizes, sizes, sizes))
    price = predict_many(m, n, k, np.ones_like(m), spec, "bf16")
    rate = 2.0 * m * n * k / price.time_s
    ceiling = spec.peak_flops_per_s("bf16") * spec.efficiency.tensor_ceiling_efficiency
    assert rate.max() <= ceiling * (1 + 1e-9)
    # and the largest shapes come within 15% of it: the ceiling is reached, not a wall far off
    assert rate.max() >= 0.85 * ceiling


def test_the_token_dimension_m_needs_no_alignment():
    # 2744 and 2736 rows both need ceil(x / 256) = 11 (or ceil(x / 128) = 22) row tiles:
    # the same tiles, so the same time up to the 0.3% more bytes of A and C
    slow = dlperf.gemm(2744, 4096, 4096, dtype="bf16", gpu="h100")
    fast = dlperf.gemm(2736, 4096, 4096, dtype="bf16", gpu="h100")
    assert slow.time_s / fast.time_s < 1.01
    assert slow.alignment["m"] == "ok"
    # K still matters: 4095 misses the 16-byte alignment of bf16 (8 elements)
    misaligned = dlperf.gemm(2736, 4096, 4095, dtype="bf16", gpu="h100")
    assert misaligned.alignment["k"] != "ok"
    assert misaligned.time_s > 1.2 * fast.time_s


# -- fixed costs ---------------------------------------------------------------


def test_kernels_back_to_back_are_a_gap_apart():
    # three 1 ms kernels in a CUDA graph: the first starts after the graph's launch,
    # the next two a graph gap (the A100 trace's 5th-percentile gap) after their predecessor
    from dlperf.hardware.framework import framework_host

    launch = framework_host(A100.architecture).graph_launch_host_s
    t = issue_timeline([Row(1e-3)] * 3, A100, cuda_graphs=True)
    assert t.step_s == pytest.approx(launch + 3e-3 + 2 * A100.efficiency.graph_gap_s)
    # a graph's gap is narrower than a stream's
    assert gap_s(A100, cuda_graphs=True) < gap_s(A100)
    # DeepBench's back-to-back averages hold Volta's gap already
    assert gap_s(dlperf.gpu("v100")) == 0


def test_a_tiny_memory_bound_kernel_costs_what_the_a100_trace_shows():
    # the A100 trace's element-wise kernels under 100 kB run 3 us of device time
    # (bench/streaming.py): the streaming fixed cost plus a plateau of
    # saturation x SMs / (bandwidth x warm rate x share), about 0.1 us, not 7 us
    a100 = dlperf.gpu("a100-sxm4-40gb")
    tiny = streaming_terms(4096.0, a100)
    assert tiny[2] == streaming_latency_s(a100) == a100.efficiency.streaming_latency_s
    assert 2.5e-6 < tiny[2] + max(tiny[0], tiny[1]) < 4e-6


# -- memory-bound kernels ------------------------------------------------------


def test_data_far_larger_than_l2_streams_at_the_cold_rate():
    eff = H100.efficiency
    big = 4.0 * H100.l2_cache_bytes  # 1 - 4 = negative: nothing of it is in L2
    _, memory_s, _ = streaming_terms(big, H100)
    assert memory_s == pytest.approx(
        big / (H100.memory_bandwidth_bytes_per_s * eff.cold_dram_efficiency)
    )
    half = 0.5 * H100.l2_cache_bytes  # half of it still in L2, half from DRAM
    _, memory_s, _ = streaming_terms(half, H100)
    per_byte = 0.5 / eff.streaming_dram_efficiency + 0.5 / eff.cold_dram_efficiency
    assert memory_s == pytest.approx(half * per_byte / H100.memory_bandwidth_bytes_per_s)


# -- clocks under a power cap --------------------------------------------------


def test_power_limit_400_on_an_h100_sxm_runs_near_the_h100_nvl_rated_clock():
    eff = H100.efficiency
    capped = dlperf.gpu("h100", power_limit=400)
    # idle 0.1 x 700 = 70 W; (400 - 70) / (700 - 70) = 0.5238 ** (1 / 3.82) = 0.8443
    expected = ((400 - eff.idle_power_share * 700) / (700 - eff.idle_power_share * 700)) ** (
        1 / eff.power_clock_exponent
    )
    assert power_cap_fraction(capped) == pytest.approx(expected)
    nvl = dlperf.gpu("h100-nvl")  # rated 1545 MHz at 400 W against the SXM's 1830 MHz at 700 W
    assert 1830 * expected == pytest.approx(nvl.tensor_core_clock_mhz, rel=0.01)
    full = dlperf.gemm(16384, 16384, 16384, dtype="bf16", gpu="h100")
    slow = dlperf.gemm(16384, 16384, 16384, dtype="bf16", gpu=capped)
    # a large math-bound GEMM slows by the clock ratio, less its clock-free latency
    assert slow.achieved_flops_per_s / full.achieved_flops_per_s == pytest.approx(
        expected, rel=0.02
    )


def test_power_limit_is_refused_above_the_tdp_below_idle_and_on_the_cpu():
    with pytest.raises(DlperfError, match="above the h100-sxm5-80gb's 700 W TDP"):
        dlperf.gpu("h100", power_limit=800)
    # idle is 0.1 x 700 = 70 W: no clock runs at or below it
    with pytest.raises(DlperfError, match="idle draw"):
        dlperf.gpu("h100", power_limit=70)
    with pytest.raises(DlperfError, match="applies to GPUs"):
        dlperf.gpu("cpu", power_limit=100)


def test_gb200_holds_the_clock_its_1200_watts_feed_the_b200s_silicon():
    b200, gb200 = dlperf.gpu("b200"), dlperf.gpu("gb200")
    eff = b200.efficiency
    idle = eff.idle_power_share * b200.tdp_watts  # 100 W, the silicon's
    # 1856 MHz x ((1200 - 100) / (1000 - 100)) ** (1 / 3.82) = 1956 MHz, not the rated 2062
    held = b200.tensor_core_clock_mhz * (
        (gb200.tdp_watts - idle) / (b200.tdp_watts - idle)
    ) ** (1 / eff.power_clock_exponent)
    assert gb200.sustained_tensor_clock_mhz == pytest.approx(held, abs=1)
    assert gb200.sustained_clock_fraction(True) == pytest.approx(held / 2062, rel=1e-3)
    assert gb200.sustained_clock_fraction(False) == 1.0  # CUDA cores and HBM: unchanged
    fast = dlperf.gemm(16384, 16384, 16384, dtype="fp8", gpu="gb200")
    slow = dlperf.gemm(16384, 16384, 16384, dtype="fp8", gpu="b200")
    # a large math-bound GEMM runs 1956 / 1856 = 1.054x the B200's, not 2062 / 1856 = 1.111x
    ratio = fast.achieved_flops_per_s / slow.achieved_flops_per_s
    assert ratio == pytest.approx(held / 1856, rel=0.01)


def test_power_limit_from_a_spec_file(tmp_path):
    text = (SPECS_DIR / "h100-sxm5-80gb.toml").read_text()
    path = tmp_path / "capped.toml"
    path.write_text(text.replace("tdp_watts = 700", "tdp_watts = 700\npower_limit_watts = 400"))
    assert power_cap_fraction(dlperf.gpu(str(path))) == pytest.approx(
        power_cap_fraction(dlperf.gpu("h100", power_limit=400))
    )


@pytest.mark.parametrize(
    "args",
    [
        ["gemm", "8192", "8192", "8192", "--gpu", "h100", "--power-limit", "900"],
        # measure runs this machine's device as it is: nothing to cap or re-version
        ["measure", "torchvision:resnet18", "--input", "1x3x32x32", "--torch-version", "2.5"],
        # a CPU has no CUDA context; a context is a positive size
        ["memory", "torchvision:resnet18", "--gpu", "cpu", "--cuda-context", "1343"],
        ["memory", "torchvision:resnet18", "--gpu", "v100", "--cuda-context", "0"],
    ],
)
def test_device_settings_refused_on_the_command_line_in_one_line(args):
    out = subprocess.run([sys.executable, "-m", "dlperf", *args], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


# -- attention -----------------------------------------------------------------


def _shape(**changes) -> AttentionShape:
    """Attention at batch 8 x 16 heads, 4096 tokens, head size 128, bf16, no mask, forward."""
    long = dict(heads=16, kv_heads=16, q_len=4096, kv_len=4096, head_dim=128, value_dim=128)
    return shape(**{**long, "causal": False, "dropout": 0.0, **changes})


def test_the_dispatcher_order_follows_the_torch_version():
    shape = _shape()
    assert choose_backend(dlperf.gpu("h100", torch_version="2.4"), shape)[0] == "flash"
    assert choose_backend(dlperf.gpu("h100", torch_version="2.5.0"), shape)[0] == "cudnn"
    assert choose_backend(dlperf.gpu("h100", torch_version="2.5"), shape)[0] == "flash"
    assert choose_backend(dlperf.gpu("h100", torch_version="2.11"), shape)[0] == "cudnn"
    assert choose_backend(dlperf.gpu("a100", torch_version="2.11"), shape)[0] == "flash"
    assert cudnn_first((10, 0), (2, 12)) and not cudnn_first((8, 0), (2, 12))
    with pytest.raises(DlperfError, match="not a version"):
        dlperf.gpu("h100", torch_version="latest")
    # what torch.__version__ prints: local builds and pre-releases (an NGC container's)
    assert choose_backend(dlperf.gpu("h100", torch_version="2.14.1+cu130"), shape)[0] == "cudnn"
    assert choose_backend(dlperf.gpu("h100", torch_version="2.6.0a0+git1234"), shape)[0] == "flash"


def test_flash3_and_triton_are_priced_and_flash3_needs_hopper():
    peak = H100.peak_flops_per_s("bf16")
    fa2 = attention_efficiency(H100, _shape(), "flash", peak)
    fa3 = attention_efficiency(H100, _shape(), "flash3", peak)
    triton = attention_efficiency(H100, _shape(), "triton", peak)
    assert fa3 > 2 * fa2 > 2 * triton
    with pytest.raises(DlperfError, match="Hopper"):
        choose_backend(A100, _shape(requested="flash3"), "flash3")
    assert choose_backend(H100, _shape(), "flash2")[0] == "flash"


def test_flash1_is_flash_attention_1_where_flash_attn_1_built_it():
    from dlperf.kernels.attention import fused_terms

    # The FA2 paper: FA2 is "around 2x" FA1, so FA1's anchors are half of FA2's
    for spec in (A100, H100):
        eff = spec.efficiency
        for phase in ("forward", "backward"):
            assert eff.attention["flash1"].of(phase) == pytest.approx(
                eff.attention["flash"].of(phase) / 2, rel=0.01
            )
    # priced through the same main loop: at its anchor head size and a long unmasked
    # sequence the exponentials' share is the anchor's own, so the kernel runs at the
    # anchor x its blocks' prologue factor 32 / 33 (4096 / 128 steps, one more)
    peak = A100.peak_flops_per_s("bf16")
    fa1 = attention_efficiency(A100, _shape(), "flash1", peak)
    assert fa1 == pytest.approx(A100.efficiency.attention["flash1"].forward * 32 / 33)
    fa2 = fused_terms(A100, _shape(), "flash").math_s
    assert fused_terms(A100, _shape(), "flash1").math_s == pytest.approx(fa2 * 2, rel=0.01)
    # flash-attn 1.x: sm75 (fp16) to sm90, head sizes multiples of 8 up to 128, no masks
    fp16 = {"dtype": "fp16", "math_dtype": "fp16"}
    small = _shape(**fp16, head_dim=64, value_dim=64)
    assert choose_backend(dlperf.gpu("t4"), small, "flash1")[0] == "flash1"
    inference = _shape(needs_grad=False)
    assert choose_backend(dlperf.gpu("l4"), inference, "flash1")[0] == "flash1"
    for spec, changes, why in (
        (dlperf.gpu("v100"), fp16, "sm75 to sm90"),
        (dlperf.gpu("t4"), {}, "bf16 on sm80"),
        (A100, {"head_dim": 256, "value_dim": 256}, "multiples of 8"),
        (A100, {"mask": "padding"}, "no attention mask"),
        (A100, {"kv_heads": 4}, "grouped-query"),
        # head size 128 trains on sm80/sm90 only; an L4 (sm89) runs its forward alone
        (dlperf.gpu("l4"), {}, "above head size 64"),
    ):
        with pytest.raises(DlperfError, match=why):
            choose_backend(spec, _shape(**changes), "flash1")
    with pytest.raises(DlperfError, match="CUDA kernel"):
        choose_backend(dlperf.gpu("cpu"), _shape(), "flash1")


def test_attention_efficiency_falls_with_head_size_short_sequences_and_causal_masks():
    peak = H100.peak_flops_per_s("bf16")
    eff = H100.efficiency
    clock = H100.clock_hz(False)
    exp_rate = eff.special_function_ops_per_clock_per_sm * H100.sm_count * clock

    def exp_share(d):  # one exp per score against 2 * (d + d) GEMM FLOPs at peak
        return (1 / exp_rate) / (4 * d / peak)

    # FlashAttention-2 runs the exponentials in turn: 1/anchor = 1/main + share(128)
    anchor = eff.attention["flash"].forward
    main = 1 / (1 / anchor - exp_share(128))
    steps = 4096 / 128  # K/V steps per block; one prologue/epilogue step more
    at_64 = 1 / (1 / main + exp_share(64)) * steps / (steps + 1)
    got = attention_efficiency(H100, _shape(head_dim=64, value_dim=64), "flash", peak)
    assert got == pytest.approx(at_64)
    # FlashAttention-3 overlaps them: head size 64 costs it nothing more here
    fa3_64 = attention_efficiency(H100, _shape(head_dim=64, value_dim=64), "flash3", peak)
    fa3_128 = attention_efficiency(H100, _shape(), "flash3", peak)
    assert fa3_64 == pytest.approx(fa3_128)
    # a causal mask on 512 tokens: 4 steps, the block computes (4 + 1) / 2 of which 4 / 2
    # are useful, plus one: 4 / (4 + 3)
    short = attention_efficiency(H100, _shape(q_len=512, kv_len=512, causal=True), "flash3", peak)
    assert short == pytest.approx(eff.attention["flash3"].forward * 4 / 7)


def test_attention_kernels_on_the_command_line_say_which_ran():
    out = subprocess.run(
        [sys.executable, "-m", "dlperf", "analyze", "hf:gpt2:attn_pdrop=0,layers=1", "--gpu",
         "h100", "--attention", "flash3", "--batch", "2", "--seq-len", "256", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "FlashAttention-3" in out.stdout


# -- weight-only quantized GEMMs -----------------------------------------------


def test_weight_only_bytes_per_weight():
    assert bytes_per_weight(4, 32) == pytest.approx(0.5 + 4 / 32)  # 0.625: tinygemm
    assert bytes_per_weight(4, 128) == pytest.approx(0.5 + 4 / 128)  # 0.53125
    assert bytes_per_weight(8, 128) == pytest.approx(1 + 2 / 128)  # scale only


@pytest.mark.slow
def test_int4_group_32_costs_more_than_group_128():
    tpot = {}
    for group in (32, 128):
        report = dlperf.serve(
            "hf:llama:layers=2,hidden=1024,heads=8,mlp=2816,vocab=32000",
            gpu="a100", precision="int4-weight", quant_group=group, input_len=16, output_len=4,
        )  # fmt: skip
        tpot[group] = report.tpot_s
    assert tpot[32] > tpot[128]


def test_quant_group_is_refused_where_it_means_nothing():
    with pytest.raises(DlperfError, match="int8-weight and int4-weight"):
        from dlperf.serving.quant import scheme_for

        scheme_for("bf16", A100, 32)
    for bad in (48, 8, 64.0, True):
        with pytest.raises(DlperfError, match="power of two"):
            scheme_for("int4-weight", A100, bad)


# -- catalogue -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name, gb, tbps",
    [("gh200", 96, 4.0), ("gh200-144gb", 144, 4.9), ("h100-nvl", 94, 3.9), ("h800", 80, 3.35),
     ("h20", 96, 4.0)],
)  # fmt: skip
def test_new_hopper_parts_are_in_the_catalogue(name, gb, tbps):
    spec = dlperf.gpu(name)
    assert spec.architecture == "hopper"
    assert spec.memory_bytes == gb * 2**30
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(tbps * 1e12)
    assert spec.sources


def test_gh200_reaches_a_higher_ceiling_than_the_h100_sxm():
    # 821.0 against 792.1 TFLOPS (maximum achievable matmul FLOPS)
    assert dlperf.gpu("gh200").efficiency.tensor_ceiling_efficiency * 989.4 == pytest.approx(
        821.0, rel=1e-3
    )
    assert H100.efficiency.tensor_ceiling_efficiency * 989.4 == pytest.approx(792.1, rel=1e-3)
    assert math.isclose(
        dlperf.gpu("b200").efficiency.tensor_ceiling_efficiency * 2250, 1745, rel_tol=1e-3
    )


def test_pytorch_2_0_and_2_1_run_flash_attention_1():
    # issue 36, item 9: 2.0 said FlashAttention-2, which PyTorch's flash kernel became in 2.2
    shape = _shape()
    assert choose_backend(dlperf.gpu("a100", torch_version="2.0"), shape)[0] == "flash1"
    assert choose_backend(dlperf.gpu("a100", torch_version="2.1.2"), shape)[0] == "flash1"
    assert choose_backend(dlperf.gpu("a100", torch_version="2.1"), shape, "flash")[0] == "flash1"
    assert choose_backend(dlperf.gpu("a100", torch_version="2.2"), shape)[0] == "flash"


@pytest.mark.parametrize("version", ["9.9", "3.0", "0.4"])
def test_a_pytorch_version_dlperf_does_not_know_is_refused(version):
    # issue 36, item 9: each was accepted and priced as FlashAttention-2
    with pytest.raises(DlperfError, match=f"{version} is not a PyTorch release dlperf knows"):
        dlperf.gpu("h100", torch_version=version)
