"""--precision mxfp8 / nvfp4: Blackwell's block-scaled formats, as Transformer
Engine's recipes run them (src/dlperf/precision.py `LinearFormat`, and the
"Block-scaled formats" rules of src/dlperf/ops/float8.py)."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import DlperfError
from dlperf.precision import LINEAR_FORMATS, POLICIES

from .test_bad_inputs import CNN, assert_one_line_error, run
from .test_fp8 import QKVBlock, gemm_costs

MX, NV = LINEAR_FORMATS["mxfp8"], LINEAR_FORMATS["nvfp4"]


def test_formats_bytes_and_math():
    # MXFP8: 1 B e4m3 + a 1 B e8m0 scale per 32 elements; NVFP4: half a byte e2m1
    # + a 1 B e4m3 scale per 16.
    assert MX.bytes_per_element == 1 + 1 / 32
    assert NV.bytes_per_element == 0.5 + 1 / 16
    assert (MX.gemm_dtype, MX.amax_pass) == ("fp8", False)
    assert (NV.gemm_dtype, NV.amax_pass) == ("fp4", True)
    for name in ("mxfp8", "nvfp4"):
        policy = POLICIES[name]
        assert policy.fp8_linear and policy.linear_format.name == name
        # everything else runs as amp-bf16: fp32 masters, a bf16 copy
        assert (policy.param_dtype, policy.autocast_dtype) == (torch.float32, torch.bfloat16)


@pytest.mark.parametrize("gpu, other", [("h100", "fp8"), ("a100", "auto"), ("cpu", "auto")])
@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_refused_before_blackwell(gpu, other, name):
    with pytest.raises(DlperfError) as found:
        dlperf.analyze(nn.Linear(16, 16), torch.randn(4, 16), gpu=gpu, precision=name)
    message = str(found.value)
    assert "\n" not in message
    assert "compute capability 10.0 or later" in message
    assert message.endswith(f"use --precision {other}")


def test_refusal_is_one_line_on_the_command_line(capsys):
    code, out, err = run(capsys, ["analyze", CNN, "--gpu", "h100", "--precision", "nvfp4"])
    assert_one_line_error(code, out, err)
    assert "Blackwell's block-scaled Tensor Cores" in err


def test_fp4_peak_is_twice_fp8_on_blackwell():
    for gpu in ("b200", "gb200-nvl72-186gb"):
        spec = dlperf.gpu(gpu)
        assert spec.peak_flops_per_s("fp4") == 2 * spec.peak_flops_per_s("fp8")
    assert not dlperf.gpu("h100").has_dtype("fp4")


def _layer0_fprop(precision):
    # M = 2 x 8 = 16 tokens; layer 0: 32 -> 64 with bias, layer 1: 64 -> 48.
    model = nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 48, bias=False))
    found = gemm_costs(model, torch.randn(2, 8, 32), gpu="b200", precision=precision)
    return [c for _, _, c in found]


def test_mxfp8_casts_read_once_and_write_the_scales():
    fprop0, _, wgrad1, dgrad1, _ = _layer0_fprop("mxfp8")
    assert [c.gemms[0].dtype for c in (fprop0, wgrad1, dgrad1)] == ["fp8"] * 3
    # fprop 0 casts X (16 x 32 = 512 elements): no amax pass, so read 2 B once and
    # write both layouts at 1 + 1/32 B: 1024 + 1056 B, one kernel.
    assert fprop0.side_bytes == 1024 + 1056
    # operands X (512) and W (64 x 32 = 2048) at 1 + 1/32 B: 2640; bias 64 x 2 B
    assert fprop0.bytes_read == 2640 + 128 + 1024 == 3792
    assert fprop0.bytes_written == 16 * 64 * 2 + 1056 == 3104
    assert fprop0.kernels == 1 + 1
    # dgrad 1 casts nothing: both copies exist
    assert (dgrad1.side_bytes, dgrad1.kernels) == (0, 1)


def test_nvfp4_casts_have_an_amax_pass_and_half_byte_elements():
    fprop0, _, wgrad1, dgrad1, _ = _layer0_fprop("nvfp4")
    assert [c.gemms[0].dtype for c in (fprop0, wgrad1, dgrad1)] == ["fp4"] * 3
    # X (512): amax read 2 B, cast read 2 B, two layouts at 0.5 + 1/16 B: 2048 + 576
    assert fprop0.side_bytes == 2048 + 576
    # operands (512 + 2048) x 0.5625 B = 1440; bias 128
    assert fprop0.bytes_read == 1440 + 128 + 2048 == 3616
    assert fprop0.bytes_written == 2048 + 576
    assert fprop0.kernels == 1 + 3  # two-stage amax, cast


def test_weights_cast_once_per_step_in_each_format():
    # 128 x 64 + 32 x 128 = 12,288 weight elements, from their fp32 masters.
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 32, bias=False))
    x = torch.randn(4, 16, 64)
    mx = dlperf.analyze(model, x, gpu="b200", precision="mxfp8").rows[-1]
    nv = dlperf.analyze(model, x, gpu="b200", precision="nvfp4").rows[-1]
    assert (mx.op, nv.op) == ("fp8.weight_cast", "fp8.weight_cast")
    # MXFP8: the master read once (4 B), both layouts written (2 x 1.03125 B)
    assert mx.bytes == 12_288 * (4 + 2 * 1.03125) == 74_496
    assert mx.kernels == 2  # one per weight, no amaxes to reduce
    # NVFP4: read twice (amax, cast), both layouts at 0.5625 B
    assert nv.bytes == 12_288 * (8 + 2 * 0.5625) == 112_128
    assert nv.kernels == 2 + 2


def test_mxfp8_has_no_amax_for_a_norm_to_fuse():
    # QKVBlock (tests/test_fp8.py): q, k, v share one cast of the norm's output;
    # proj's input comes from a GEMM. Under fp8 proj's cast costs more (its amax
    # pass is not fused); under MXFP8 there is no amax pass: both cost the same.
    x = torch.randn(2, 16, 64)
    mx = dlperf.analyze(QKVBlock(), x, gpu="b200", precision="mxfp8")
    fprop = {r.module: r for r in mx.rows if r.gemms and r.phase == "forward" and r.module}
    assert (fprop["q"].bytes, fprop["q"].kernels) == (fprop["proj"].bytes, fprop["proj"].kernels)
    # the GEMM alone: X, W at 1.03125 B (2048 + 4096 elements), bias 128, Y 4096;
    # the cast: read 2 B, write 2 x 1.03125 B per element of X
    gemm = 6144 * 1.03125 + 128 + 4096
    assert fprop["q"].bytes == gemm + 2 * 2048 + 2 * 1.03125 * 2048
    assert (fprop["k"].bytes, fprop["k"].kernels) == (gemm, 1)


def test_nvfp4_gemms_run_at_twice_the_fp8_rate():
    # A 4096-wide layer on 8192 tokens is math-bound: NVFP4's fprop GEMM takes
    # about half MXFP8's (the same tiles at twice the peak; the operands' bytes
    # halve too).
    x = torch.randn(2, 4096, 4096)
    layer = nn.Linear(4096, 4096, bias=False)
    times = {}
    for name in ("mxfp8", "nvfp4"):
        a = dlperf.analyze(layer, x, gpu="b200", precision=name)
        fprop = next(r for r in a.rows if r.gemms and r.gemms[0].role == "fprop")
        times[name] = fprop.gemms[0].time_s
    assert times["nvfp4"] == pytest.approx(times["mxfp8"] / 2, rel=0.15)
