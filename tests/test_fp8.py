"""--precision fp8: linear layers' GEMMs on fp8 Tensor Cores with their casts,
everything else as amp-bf16 (see src/dlperf/ops/float8.py for the rules)."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.dtypes import accumulator_bytes, runnable_dtype
from dlperf.errors import DlperfError
from dlperf.ops import CostContext, cost_of
from dlperf.ops.float8 import gemm_role
from dlperf.ops.linear import is_linear_module
from dlperf.precision import POLICIES, compute_policy, resolve_for
from dlperf.run import Session, resolve
from dlperf.tracing import OpEvent, TensorMeta

from .test_bad_inputs import CNN, assert_one_line_error, run

FP8 = POLICIES["fp8"]


def gemm_costs(model, x, gpu="h100", precision="fp8"):
    """(module, phase, Cost) of every mm/addmm of a training step under fp8."""
    trace = Session().trace(resolve(model, x, gpu=gpu, precision=precision))
    ctx = CostContext(trace.precision)
    return [
        (e.module, e.phase, cost_of(e, ctx))
        for e in trace.events
        if e.packet in ("aten.mm", "aten.addmm")
    ]


def test_fp8_policy_is_amp_bf16_with_fp8_linears():
    amp = POLICIES["amp-bf16"]
    assert (FP8.param_dtype, FP8.autocast_dtype) == (torch.float32, torch.bfloat16)
    assert FP8.fp8_linear and not amp.fp8_linear
    # Memory as amp-bf16: 4 B fp32 masters and grads, a 2 B copy beside them.
    assert (FP8.master_weight_bytes, FP8.grad_bytes, FP8.cast_weight_bytes) == (4, 4, 2)
    assert FP8.contraction_dtype(torch.bfloat16) == "bf16"  # convs, attention: bf16
    assert resolve_for(dlperf.gpu("h100"), "auto").name == "amp-bf16"


@pytest.mark.parametrize(
    "gpu, fallback", [("a100", "amp-bf16"), ("v100", "amp-fp16"), ("t4", "amp-fp16")]
)
def test_fp8_refused_without_fp8_tensor_cores(gpu, fallback):
    with pytest.raises(DlperfError) as found:
        dlperf.analyze(nn.Linear(16, 16), torch.randn(4, 16), gpu=gpu, precision="fp8")
    message = str(found.value)
    assert "\n" not in message
    assert "fp8 needs Hopper, Ada or Blackwell" in message
    assert f"use --precision {fallback}" in message


def test_fp8_on_a100_is_one_line_on_the_command_line(capsys):
    argv = ["analyze", CNN, "--gpu", "a100", "--precision", "fp8"]
    code, out, err = run(capsys, argv)
    assert_one_line_error(code, out, err)
    assert "fp8 needs Hopper, Ada or Blackwell" in err


@pytest.mark.parametrize(
    "gpu", ["h100", "h100-pcie-80gb", "h200", "l4", "l40s", "rtx-4090", "b200"]
)
def test_fp8_peak_is_twice_bf16_on_fp8_gpus(gpu):
    # Datasheets (cited in the spec files): fp8 Tensor Cores run twice the bf16
    # rate (FP32 accumulate on the RTX 4090); the L40S sheet's dense figures,
    # 733 and 362.05 TFLOPS, are 2.025 apart, hence 3%.
    spec = dlperf.gpu(gpu)
    assert resolve_for(spec, "fp8") is FP8
    assert spec.peak_flops_per_s("fp8") == pytest.approx(2 * spec.peak_flops_per_s("bf16"), 0.03)


def test_dtypes_fp8():
    assert accumulator_bytes("fp8") == 2  # fp32 accumulation, bf16 output
    assert runnable_dtype("fp8", dlperf.gpu("h100")) == "fp8"
    assert runnable_dtype("fp8", dlperf.gpu("a100")) == "bf16"
    assert runnable_dtype("fp8", dlperf.gpu("v100")) == "fp16"


def test_tile_model_prices_fp8_operands_and_alignment():
    fp8 = dlperf.gemm(8192, 8192, 8192, dtype="fp8", gpu="h100")
    bf16 = dlperf.gemm(8192, 8192, 8192, dtype="bf16", gpu="h100")
    # 1 B operands, 2 B output: (2 x 8192^2) x 1 + 8192^2 x 2 = 4 x 8192^2
    assert fp8.bytes == 4 * 8192**2
    assert fp8.peak_flops_per_s == 1978.9e12
    assert 1 < bf16.time_s / fp8.time_s <= 2
    # Tensor Cores need 16 bytes along K (and N): 16 fp8 elements, 8 bf16 ones (best
    # 128 B: 128 and 64); 8200 = 16 x 512 + 8. M, the rows, needs none.
    assert dlperf.gemm(8192, 8192, 8200, dtype="fp8", gpu="h100").alignment["k"] == (
        "not a multiple of 16"
    )
    assert dlperf.gemm(8192, 8192, 8200, dtype="bf16", gpu="h100").alignment["k"] == (
        "not a multiple of 64"
    )
    assert dlperf.gemm(8200, 8192, 8192, dtype="fp8", gpu="h100").alignment["m"] == "ok"


def test_linear_module_names():
    for name in ("Linear", "NonDynamicallyQuantizableLinear", "LayerNormLinear", "Conv1D"):
        assert is_linear_module(name)
    for name in ("Bilinear", "Conv2d", "MultiheadAttention", "LayerNorm", ""):
        assert not is_linear_module(name)


def test_roles_from_phase_and_operand_layout():
    a = TensorMeta((48, 16), torch.bfloat16, (16, 1))
    a_t = TensorMeta((48, 16), torch.bfloat16, (1, 48))  # a transposed view
    b = TensorMeta((16, 64), torch.bfloat16, (64, 1))

    def role(left, phase):
        return gemm_role(OpEvent("aten.mm.default", (left, b), {}, (), "l", phase, "Linear"))

    assert role(a, "forward") == "fprop"
    assert role(a_t, "recompute") == "fprop"  # checkpointing runs the forward again
    assert role(a, "backward") == "dgrad"
    assert role(a_t, "backward") == "wgrad"


def test_cast_bytes_per_linear():
    # M = 2 x 8 = 16 tokens; layer 0: 32 -> 64 with bias, layer 1: 64 -> 48 without.
    # The input needs no gradient: layer 0 runs no dgrad.
    model = nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 48, bias=False))
    found = gemm_costs(model, torch.randn(2, 8, 32))
    roles = [(m, p, c.gemms[0].role, c.gemms[0].dtype) for m, p, c in found]
    assert roles == [
        ("0", "forward", "fprop", "fp8"),
        ("1", "forward", "fprop", "fp8"),
        ("1", "backward", "wgrad", "fp8"),
        ("1", "backward", "dgrad", "fp8"),
        ("0", "backward", "wgrad", "fp8"),
    ]
    fprop0, fprop1, wgrad1, dgrad1, wgrad0 = (c for _, _, c in found)
    # A cast of n elements: amax read 2n, cast read 2n, two fp8 layouts written 2n;
    # 3 kernels (two-stage amax, cast). Weights are cast once per step, in the
    # optimizer phase (`test_weights_are_cast_once_per_step`), not here.
    # fprop 0 casts X (16 x 32 = 512).
    assert fprop0.side_bytes == 6 * 512
    # read: fp8 operands X 512 + W 64 x 32 = 2048, bias 64 x 2, cast 4 x 512 = 4736
    assert fprop0.bytes_read == 512 + 2048 + 128 + 4 * 512 == 4736
    # written: bf16 output 16 x 64 x 2 + cast 2 x 512 = 3072
    assert fprop0.bytes_written == 2048 + 2 * 512 == 3072
    assert fprop0.kernels == 1 + 3
    # fprop 1 casts X (16 x 64 = 1024).
    assert fprop1.side_bytes == 6 * 1024
    # wgrad 1: dW[48, 64] = dY^T[48, 16] X[16, 64]; casts dY (16 x 48 = 768) only:
    # X's transposed fp8 copy was written in forward.
    assert wgrad1.side_bytes == 6 * 768
    assert wgrad1.bytes_read == (768 + 1024) + 4 * 768
    assert wgrad1.bytes_written == 48 * 64 * 2 + 2 * 768
    assert wgrad1.kernels == 1 + 3
    # dgrad 1: dX[16, 64] = dY[16, 48] W[48, 64]; both fp8 copies exist: no cast.
    assert (dgrad1.side_bytes, dgrad1.kernels) == (0, 1)
    assert dgrad1.bytes_read == 768 + 3072 and dgrad1.bytes_written == 16 * 64 * 2
    # wgrad 0 casts layer 0's output gradient dY (16 x 64 = 1024).
    assert wgrad0.side_bytes == 6 * 1024
    for cost in (fprop0, fprop1, wgrad1, dgrad1, wgrad0):
        assert cost.flops == cost.gemms[0].flops


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 linear layer: weight stored [in, out], addmm(b, x, W)."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.reshape(*x.shape[:-1], -1)


def test_conv1d_wgrad_casts_the_output_gradient():
    # 16 tokens, 32 -> 48: wgrad dW[32, 48] = X^T[32, 16] dY[16, 48] casts dY, the
    # right factor (16 x 48 = 768 elements), not X (16 x 32 = 512).
    found = gemm_costs(Conv1D(32, 48), torch.randn(2, 8, 32, requires_grad=True))
    by_role = {c.gemms[0].role: c for _, _, c in found}
    assert set(by_role) == {"fprop", "dgrad", "wgrad"}
    assert by_role["wgrad"].side_bytes == 6 * 768
    assert by_role["fprop"].side_bytes == 6 * 512  # X only: W once per step
    assert by_role["dgrad"].side_bytes == 0


class TinyBlock(nn.Module):
    """Norm, attention with explicit bmm, an MLP and a head over 100 classes."""

    def __init__(self, d=64, vocab=100):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab)  # 100 is no multiple of 16: stays bf16

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8.0, dim=-1)
        x = x + self.proj(torch.bmm(att, v))
        x = x + self.mlp(x)
        return self.head(x)


def test_only_linears_run_fp8_and_flops_equal_amp_bf16():
    model, x = TinyBlock(), torch.randn(2, 16, 64)
    fp8 = dlperf.analyze(model, x, gpu="h100", precision="fp8")
    amp = dlperf.analyze(model, x, gpu="h100", precision="amp-bf16")
    assert fp8.totals["flops"] == amp.totals["flops"]
    gemm_rows = [r for r in fp8.rows if r.gemms]
    fp8_modules = {r.module for r in gemm_rows if r.dtype == "fp8"}
    assert fp8_modules == {"qkv", "proj", "mlp.0", "mlp.2"}
    # The attention's bmm and the head run bf16; norms and GELU are no GEMMs.
    assert {r.module for r in gemm_rows if r.dtype == "bf16"} == {"", "head"}
    assert all(r.dtype != "fp8" for r in fp8.rows if r.module in ("norm", "mlp.1"))
    # Per fp8 linear: fprop, wgrad, dgrad (x needs no gradient, but qkv's input
    # comes from the norm, which does).
    assert sorted(g.role for r in gemm_rows if r.module == "qkv" for g in r.gemms) == [
        "dgrad",
        "fprop",
        "wgrad",
    ]


def test_gpt2_linears_run_fp8_and_attention_does_not():
    pytest.importorskip("transformers")
    # A small GPT-2: its Conv1D layers 64 -> 192, 64 -> 64, 64 -> 256, 256 -> 64 have
    # features that are multiples of 16; the LM head over 100 tokens has not.
    model = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=100,positions=64"
    fp8 = dlperf.analyze(model, gpu="h100", precision="fp8", batch=2, seq_len=64)
    amp = dlperf.analyze(model, gpu="h100", precision="amp-bf16", batch=2, seq_len=64)
    assert fp8.totals["flops"] == amp.totals["flops"]
    prefix = "transformer.h.0."
    expected = {prefix + n for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert {r.module for r in fp8.rows if r.dtype == "fp8"} == expected
    roles = sorted(g.role for r in fp8.rows if r.dtype == "fp8" for g in r.gemms)
    assert roles == ["dgrad"] * 4 + ["fprop"] * 4 + ["wgrad"] * 4
    # Op for op, the same step as amp-bf16 but the linears' bf16 GEMMs: the LM
    # head, attention, norms and casts keep their dtypes; the step adds the
    # weights' fp8 casts after the optimizer.
    rows = fp8.rows[:-1]
    assert fp8.rows[-1].op == "fp8.weight_cast"
    assert [(r.module, r.op) for r in rows] == [(r.module, r.op) for r in amp.rows]
    changed = {(b.op, b.dtype) for f, b in zip(rows, amp.rows, strict=True) if f.dtype != b.dtype}
    assert changed == {("aten.addmm.default", "bf16"), ("aten.mm.default", "bf16")}


def test_fp8_step_faster_than_amp_bf16_by_less_than_the_peak_ratio():
    # 8 linear layers of 8192 x 8192 over 8 x 1024 = 8192 tokens: each GEMM does
    # 2 x 8192^3 = 1.1 TFLOP, math-bound in bf16 and fp8 alike. fp8 halves their
    # math time at best; the casts, the bias gradients, the weight copies and the
    # optimizer do not speed up, so the step gains less than the peak ratio.
    model = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(8)])
    x = torch.empty(8, 1024, 8192)
    spec = dlperf.gpu("h100")
    fp8 = dlperf.analyze(model, x, gpu=spec, precision="fp8")
    amp = dlperf.analyze(model, x, gpu=spec, precision="amp-bf16")
    peak_ratio = spec.peak_flops_per_s("fp8") / spec.peak_flops_per_s("bf16")
    assert 1.0 < amp.time_s / fp8.time_s < peak_ratio
    # Every linear GEMM runs in fp8.
    assert all(r.dtype == "fp8" for r in fp8.rows if r.gemms)
    assert fp8.totals["flops"] == amp.totals["flops"]


def test_fsdp_layouts_keep_the_fp8_gemms():
    # FSDP's mixed precision runs the model in bf16 without autocast
    # (`parallel/report.py`); under fp8 its linear layers' GEMMs stay fp8. The
    # FSDP trace of fp8 was the bf16 one, so an fp8 FSDP plan priced as amp-bf16.
    spec = dlperf.gpu("h100")
    compute = compute_policy(spec, FP8)
    assert (compute.param_dtype, compute.autocast_dtype) == (torch.bfloat16, None)
    assert compute.fp8_linear and compute.math == "fp8"
    assert not compute_policy(spec, POLICIES["amp-bf16"]).fp8_linear
    # One linear layer 8192 -> 8192 on 8 x 1024 = 8192 tokens, traced in bf16:
    # fprop casts X (8192 x 8192 = 67,108,864 elements), 6 B each (amax read 2,
    # cast read 2, two fp8 layouts written 2); W is cast once per step.
    model, x = nn.Linear(8192, 8192, bias=False), torch.empty(8, 1024, 8192)
    trace = Session().trace(resolve(model.to(torch.bfloat16), x.bfloat16(), gpu=spec,
                                    precision=compute))  # fmt: skip
    ctx = CostContext(trace.precision)
    fprop = next(cost_of(e, ctx) for e in trace.events if e.packet == "aten.mm")
    assert fprop.gemms[0].dtype == "fp8" and fprop.gemms[0].role == "fprop"
    assert fprop.side_bytes == 6 * 67_108_864
    # A plan's FSDP layout, forced alike in fp8 and amp-bf16: 2 x 4096 = 8192
    # tokens through 2 layers of hidden and MLP size 8192, whose GEMMs (2 x
    # 8192^3 = 1.1 TFLOP for each MLP GEMM, math-bound) run at about 1.45 PFLOP/s
    # in fp8 against 0.75 in bf16 (`dlperf gemm 8192 8192 8192 --gpu h100`);
    # the layers' GEMMs are most of the step, so fp8's compute is well below
    # amp-bf16's. Before, the FSDP trace of fp8 was bf16's and the two were equal.
    common = dict(gpu="h100", gpus=8, micro_batch=2, seq_len=4096, dp=8, tp=1, pp=1,
                  checkpoint="none", sharding="fsdp")  # fmt: skip
    layers = "hf:llama:layers=2,hidden=8192,heads=64,kv_heads=8,mlp=8192,vocab=512"
    fp8 = dlperf.plan(layers, precision="fp8", **common).best
    amp = dlperf.plan(layers, precision="amp-bf16", **common).best
    assert fp8.compute_time_s < 0.85 * amp.compute_time_s


def test_weights_are_cast_once_per_step():
    # Transformer Engine casts an fp8 weight once per optimizer step (Megatron's
    # fp8 parameters, or `is_first_microbatch`), from its fp32 master: no bf16
    # copy per forward, no copy of its gradient to fp32 per backward.
    # Two linear layers 64 -> 128 -> 32 on 4 x 16 = 64 tokens; x needs no grad.
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 32, bias=False))
    fp8 = dlperf.analyze(model, torch.randn(4, 16, 64), gpu="h100", precision="fp8")
    amp = dlperf.analyze(model, torch.randn(4, 16, 64), gpu="h100", precision="amp-bf16")

    def copies(analysis):
        return [r for r in analysis.rows if r.op == "aten._to_copy.default" and r.module in "01"]

    # autocast's copies in the layers: X to bf16 (forward), and per weight its
    # bf16 copy (forward) and its gradient's fp32 copy (backward): 5. Under
    # amp-bf16 all five run; under fp8 the four weight copies are free.
    assert len(copies(fp8)) == len(copies(amp)) == 5
    assert [r.time_s == 0 for r in copies(fp8)] == [True, False, True, True, True]
    cast = fp8.rows[-1]
    assert (cast.op, cast.phase) == ("fp8.weight_cast", "optimizer")
    # 128 x 64 + 32 x 128 = 12,288 weight elements: read 8 B each from the fp32
    # masters (amax, cast), written 2 x 1 B (both layouts): 98,304 + 24,576 B
    assert cast.bytes == 12_288 * (8 + 2) == 122_880
    assert cast.kernels == 2 + 2  # amaxes and scales for all, one cast per weight
    # Layer 0's wgrad dW[128, 64] = dY^T[128, 64] X[64, 64] writes the fp32
    # gradient its copy made (128 x 64 x 4 B = 32,768) and its dY cast's two fp8
    # layouts (8192 x 2 B = 16,384); reads the fp8 operands (8192 + 4096 B) and
    # dY twice in bf16 for the cast (4 x 8192 B): 49,152 + 45,056 B.
    wgrad0 = next(r for r in fp8.rows if r.module == "0" and r.gemms[:1]
                  and r.gemms[0].role == "wgrad")  # fmt: skip
    assert wgrad0.bytes == 32_768 + 16_384 + 8192 + 4096 + 4 * 8192 == 94_208


class QKVBlock(nn.Module):
    """A norm feeding three projections, attention-free: q, k, v read one input."""

    def __init__(self, d=64):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        h = self.norm(x)
        return self.proj(torch.bmm(self.q(h), self.k(h).transpose(1, 2)) @ self.v(h))


def test_input_casts_shared_and_amax_fused_into_the_norm():
    # 2 x 16 = 32 tokens of 64 features. q, k and v read the norm's output
    # (through autocast's bf16 copies of it): one cast, as Megatron's fused
    # linear_qkv runs it, and its amax computed by the norm (TE's
    # FUSED_NORM_AMAX_FP8): the cast reads 2 B and writes 2 x 1 B per element
    # in 1 kernel: 32 x 64 = 2048 elements, 4096 + 4096 B. k and v cast nothing.
    # proj reads the attention's bmm output (a GEMM): amax and cast unfused,
    # 6 B per element in 3 kernels.
    model, x = QKVBlock(), torch.randn(2, 16, 64)
    fp8 = dlperf.analyze(model, x, gpu="h100", precision="fp8")
    amp = dlperf.analyze(model, x, gpu="h100", precision="amp-bf16")
    fprop = {r.module: r for r in fp8.rows if r.dtype == "fp8" and r.phase == "forward"}
    bf16 = {r.module: r for r in amp.rows if r.gemms and r.phase == "forward" and r.module}
    # the GEMM alone reads X and W in fp8 (2048 + 4096 B) and the bias (128 B) and
    # writes Y in bf16 (4096 B), where bf16 reads twice as many operand bytes
    gemm = 2048 + 4096 + 128 + 4096
    assert bf16["q"].bytes == 2 * (2048 + 4096) + 128 + 4096
    assert (fprop["q"].bytes, fprop["q"].kernels) == (gemm + 2 * 2048 + 2 * 2048, 1 + 1)
    for shared in ("k", "v"):
        assert (fprop[shared].bytes, fprop[shared].kernels) == (gemm, 1)
    assert (fprop["proj"].bytes, fprop["proj"].kernels) == (gemm + 6 * 2048, 1 + 3)
