"""--infer --precision int8 (and fp8): convolutions and linear layers as
quantized GEMMs with their inputs' quantize kernels, everything else in half
precision (see src/dlperf/ops/quantized.py for the rules)."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import DlperfError
from dlperf.ops import CostContext, cost_of
from dlperf.precision import FP8_INFERENCE, POLICIES, resolve_for
from dlperf.run import Session, resolve

from .test_bad_inputs import CNN, assert_one_line_error, run

INT8 = POLICIES["int8"]
X = "2x3x8x8"


class TinyResNet(nn.Module):
    """A stem and one basic residual block of ResNet-18, narrowed to 16 channels."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(16)
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn0(self.stem(x)))
        z = torch.relu(self.bn1(self.conv1(y)))
        y = torch.relu(self.bn2(self.conv2(z)) + y)
        return self.fc(y.mean((2, 3)))


def costs(precision="int8", gpu="a100", model=None):
    """{module: Cost} of the convolutions and linear layers of one inference pass."""
    run_ = resolve(model or TinyResNet(), X, gpu=gpu, precision=precision, training=False)
    trace = Session().trace(run_)
    ctx = CostContext(trace.precision)
    wanted = ("aten.convolution", "aten.addmm", "aten.mm")
    return {e.module: cost_of(e, ctx) for e in trace.events if e.packet in wanted}


def test_int8_policy_is_fp16_with_int8_gemms():
    assert (INT8.param_dtype, INT8.autocast_dtype, INT8.quantized_gemms) == (
        torch.float16,
        None,
        "int8",
    )
    a100 = dlperf.gpu("a100")
    assert resolve_for(a100, "int8", training=False) is INT8
    assert resolve_for(a100, "auto").name == "amp-bf16"  # auto unchanged
    # fp8 keeps its training form for training and takes the engine form for inference
    h100 = dlperf.gpu("h100")
    assert resolve_for(h100, "fp8", training=True) is POLICIES["fp8"]
    assert resolve_for(h100, "fp8", training=False) is FP8_INFERENCE
    assert FP8_INFERENCE.quantized_gemms == "fp8" and not FP8_INFERENCE.fp8_linear


def test_int8_convolutions_and_linear_bytes_on_a100():
    found = costs()
    assert set(found) == {"stem", "conv1", "conv2", "fc"}
    for cost in found.values():
        assert [(g.dtype, g.storage) for g in cost.gemms] == [("int8", "int8")]
        assert cost.kernels == 2  # the GEMM and its input's quantize kernel
    # conv1: x [2, 16, 8, 8] = 2048 elements, w [16, 16, 3, 3] = 2304, out 2048.
    # Read: x and w at 1 B (2048 + 2304) plus the quantize's fp16 read (2 x 2048)
    # = 8448; written: out at 2 B (4096) plus the quantized x at 1 B (2048) = 6144.
    conv1 = found["conv1"]
    assert (conv1.bytes_read, conv1.bytes_written) == (8448, 6144)
    assert conv1.side_bytes == 3 * 2048  # the quantize kernel: 2 B read + 1 B written
    # The GEMM itself moves x, w at 1 B and out at 2 B: 2048 + 2304 + 4096.
    (gemm,) = conv1.gemms
    assert gemm.tensor_bytes == 8448
    # Implicit GEMM: M = 2 x 8 x 8 pixels, N = 16 out channels, K = 16 x 3 x 3.
    assert (gemm.m, gemm.n, gemm.k) == (128, 16, 144)
    # stem: x [2, 3, 8, 8] = 384, w [16, 3, 3, 3] = 432: 384 + 432 + 2 x 384 = 1584.
    assert found["stem"].bytes_read == 1584
    # fc: X [2, 16] = 32, W [10, 16] = 160 at 1 B, the fp16 bias 10 x 2 = 20 and the
    # quantize's read 2 x 32: 276; written: Y [2, 10] at 2 B + X at 1 B = 40 + 32 = 72.
    assert (found["fc"].bytes_read, found["fc"].bytes_written) == (276, 72)


def test_int8_leaves_everything_else_fp16():
    rows = dlperf.analyze(TinyResNet(), X, gpu="a100", precision="int8", training=False).rows
    by_family = {r.family: r.dtype for r in rows}
    assert by_family["conv"] == "int8"
    assert by_family["batch_norm"] == "fp16"


def test_int8_refused_for_training():
    with pytest.raises(DlperfError) as found:
        dlperf.analyze(TinyResNet(), X, gpu="a100", precision="int8")
    message = str(found.value)
    assert "\n" not in message
    assert (
        message == "int8 is an inference precision: add --infer, or use amp-bf16/fp8 for training"
    )


def test_int8_on_the_command_line(capsys):
    code, out, err = run(capsys, ["analyze", CNN, "--gpu", "a100", "--precision", "int8"])
    assert_one_line_error(code, out, err)
    assert "int8 is an inference precision" in err
    argv = ["analyze", CNN, "--gpu", "a100", "--precision", "int8", "--infer", "--json"]
    code, out, err = run(capsys, argv)
    assert code == 0, err


@pytest.mark.parametrize("gpu", ["v100", "p100-pcie-16gb", "m40"])
def test_int8_refused_without_int8_math(gpu):
    # Their spec files have no int8 math table: Volta's Tensor Cores take fp16
    # only, GP100 lacks DP4A, Maxwell has neither.
    spec = dlperf.gpu(gpu)
    assert not spec.has_dtype("int8")
    with pytest.raises(DlperfError) as found:
        dlperf.analyze(TinyResNet(), X, gpu=gpu, precision="int8", training=False)
    assert "\n" not in str(found.value)
    assert "no int8 math" in str(found.value)


def test_int8_on_pascal_dp4a_runs_on_cuda_cores():
    # The GTX 1080 Ti's spec lists int8 (DP4A) math without Tensor Cores: allowed,
    # priced at that table's rate.
    spec = dlperf.gpu("gtx-1080-ti")
    assert spec.has_dtype("int8") and not spec.math["int8"].tensor_cores
    assert resolve_for(spec, "int8", training=False) is INT8


class BigConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(256, 256, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


def test_int8_faster_than_fp16_on_a_large_conv_by_less_than_the_peak_ratio():
    # A100: int8 624 TOPS against fp16 312 TFLOPS, a 2x peak ratio. A 3x3 conv of
    # 256 channels on 64 x 56 x 56 pixels (M = 200704, N = 256, K = 2304: 237 GFLOP)
    # is math-bound, so int8 gains, but less than 2x: the quantize kernel still
    # streams 3 B per input element (64 x 256 x 56 x 56 = 51.4M: 154 MB).
    shape = "64x256x56x56"
    fp16, int8 = (
        dlperf.analyze(BigConv(), shape, gpu="a100", precision=p, training=False).step_time_s
        for p in ("fp16", "int8")
    )
    a100 = dlperf.gpu("a100")
    peak_ratio = a100.peak_flops_per_s("int8") / a100.peak_flops_per_s("fp16")
    assert peak_ratio == pytest.approx(2.0)
    assert 1.0 < fp16 / int8 < peak_ratio


def test_compile_fuses_quantize_into_the_producer():
    eager, compiled = (
        {
            r.module: r
            for r in dlperf.analyze(
                TinyResNet(), X, gpu="a100", precision="int8", training=False, compile=c
            ).rows
        }
        for c in (False, True)
    )
    # The stem reads the network's input, which no kernel of the pass produced:
    # its quantize kernel stays.
    assert (eager["stem"].kernels, compiled["stem"].kernels) == (2, 2)
    for module in ("conv1", "conv2", "fc"):
        assert (eager[module].kernels, compiled[module].kernels) == (2, 1)
    # What goes is the quantize's fp16 read: conv1's input, 2048 elements x 2 B.
    assert eager["conv1"].bytes - compiled["conv1"].bytes == 2 * 2048
    # fc's X [2, 16]: 32 x 2 B.
    assert eager["fc"].bytes - compiled["fc"].bytes == 2 * 32


def test_fp8_inference_runs_convolutions_in_fp8_training_does_not():
    found = costs("fp8", gpu="h100")
    assert {m: c.gemms[0].dtype for m, c in found.items()} == dict.fromkeys(
        ("stem", "conv1", "conv2", "fc"), "fp8"
    )
    # Training under fp8 keeps its rules: convolutions in bf16 (torchao converts linears only).
    trace = Session().trace(resolve(TinyResNet(), X, gpu="h100", precision="fp8"))
    ctx = CostContext(trace.precision)
    convs = [cost_of(e, ctx) for e in trace.events if e.packet == "aten.convolution"]
    assert convs and all(c.gemms[0].dtype == "bf16" for c in convs)
