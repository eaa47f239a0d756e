"""Attention as the GPU runs it: SDPA traced as one fused op, its FLOPs, bytes
and saved tensors, the backend PyTorch's dispatcher would choose, its time."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dlperf
from dlperf.errors import DlperfError
from dlperf.hardware import gpu
from dlperf.hardware.spec import spec_from_dict
from dlperf.kernels import pricing
from dlperf.kernels.attention import choose_backend, torch_version
from dlperf.models import load_model
from dlperf.ops.cost import AttentionShape, Cost
from dlperf.tracing import trace
from tests.fake_cpu import fake_cpu_doc

OPS = ("dlperf.attention.default", "dlperf.attention_backward.default")


class Attention(nn.Module):
    """Nothing but one SDPA call (what a model's attention core does)."""

    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.options)


def qkv(b, h, s, d, kv_heads=None):
    """Meta q, k, v that ask for their gradients (a training step of the core alone)."""
    q = torch.empty(b, h, s, d, device="meta", requires_grad=True)
    kv = torch.empty(b, kv_heads or h, s, d, device="meta", requires_grad=True)
    return q, kv, kv.clone().detach().requires_grad_(True)


def attention_rows(analysis):
    return [r for r in analysis.rows if r.op in OPS]


def shape(**changes) -> AttentionShape:
    """GPT-2 small's attention at batch 8, sequence 1024, bf16, forward."""
    base = AttentionShape(
        batch=8, heads=12, kv_heads=12, q_len=1024, kv_len=1024, head_dim=64, value_dim=64,
        causal=True, dtype="bf16", math_dtype="bf16", mask="", dropout=0.1, phase="forward",
        requested="auto",
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


# -- tracing -----------------------------------------------------------------------


def test_gpt2_amp_bf16_training_on_a100_is_fused_bf16_attention():
    a = dlperf.analyze("hf:gpt2:layers=2", gpu="a100", precision="amp-bf16", batch=2, seq_len=128)
    rows = attention_rows(a)
    # one forward and one backward call per layer, in the autocast dtype
    assert sorted((r.phase.value, r.op) for r in rows) == sorted(
        [("forward", OPS[0])] * 2 + [("backward", OPS[1])] * 2
    )
    assert {r.dtype for r in rows} == {"bf16"}
    core = [r for r in a.rows if r.module.endswith(".attn")]
    assert not [r for r in core if r.family == "matmul"]  # no bmm of Q K^T or P V at all
    assert not [r for r in a.rows if r.family == "softmax" and r.shapes[0][-2:] == [128, 128]]
    # GPT-2 passes no mask on a GPU (is_causal=True), so flash runs it
    (note,) = [n for n in rows[0].notes if n.startswith("attention: ")]
    assert note.startswith("attention: flash, FlashAttention-2 (sm80, torch ")
    assert note.endswith(", bf16, head size 64, no mask)")


def test_eager_traces_the_models_own_matmuls_and_math_runs_in_the_autocast_dtype():
    eager = dlperf.analyze("hf:gpt2:layers=1", precision="amp-bf16", seq_len=64, attention="eager")
    math_path = dlperf.analyze(
        "hf:gpt2:layers=1", precision="amp-bf16", seq_len=64, attention="math"
    )
    for a in (eager, math_path):
        assert not attention_rows(a)
        bmm = [r for r in a.rows if r.op == "aten.bmm.default" and ".attn" in r.module]
        # forward Q K^T and P V, backward two gradients of each
        assert len(bmm) == 2 + 4
    # the math backend runs in bf16 as CUDA's does (PyTorch's CPU kernel upcasts to fp32)
    assert {r.dtype for r in math_path.rows if r.op == "aten.bmm.default"} == {"bf16"}


def test_nothing_is_swapped_outside_the_trace():
    masking = pytest.importorskip("transformers.masking_utils")
    before = masking.find_packed_sequence_indices
    trace(Attention(is_causal=True), qkv(1, 2, 16, 8))
    assert masking.find_packed_sequence_indices is before
    assert not torch.overrides._get_current_function_mode_stack()
    q = torch.randn(1, 2, 16, 8)  # real tensors run PyTorch's own kernel
    out = F.scaled_dot_product_attention(q, q, q)
    assert out.shape == q.shape and out.grad_fn is None


def test_unknown_attention_is_refused_in_one_line():
    with pytest.raises(DlperfError, match="unknown attention 'fast'; choose from: auto, flash"):
        trace(Attention(), qkv(1, 1, 8, 8), attention="fast")


# -- FLOPs, bytes and saved tensors ------------------------------------------------


def test_flops_of_forward_and_backward_causal_and_not():
    b, h, s, d = 2, 4, 256, 32
    full = attention_rows(dlperf.analyze(Attention(), qkv(b, h, s, d), precision="bf16"))
    causal = attention_rows(
        dlperf.analyze(Attention(is_causal=True), qkv(b, h, s, d), precision="bf16")
    )
    forward = 4 * b * h * s * s * d  # Q K^T and P V: 2 GEMMs of 2 * s * s * d each
    assert forward == 67_108_864
    assert [r.flops for r in full] == [forward, 2.5 * forward]  # backward: 5 GEMMs
    assert [r.flops for r in causal] == [forward / 2, 2.5 * forward / 2]


def test_bytes_are_q_k_v_output_and_lse_and_no_score_matrix():
    b, h, s, d = 2, 4, 256, 32
    fwd, bwd = attention_rows(dlperf.analyze(Attention(), qkv(b, h, s, d), precision="bf16"))
    tensor = b * h * s * d * 2  # one bf16 (b, h, s, d) tensor: 131072 bytes
    lse = b * h * s * 4  # fp32 log-sum-exp per row: 8192 bytes
    assert fwd.bytes == 3 * tensor + tensor + lse  # reads q, k, v; writes out, lse
    # reads dO, q, k, v, out, lse; writes dq, dk, dv
    assert bwd.bytes == 4 * tensor + tensor + lse + 3 * tensor
    assert fwd.bytes < b * h * s * s * 2  # less than one bf16 score matrix


def test_saved_for_backward_is_what_the_flash_kernel_keeps():
    b, h, s, d = 2, 4, 128, 32
    fused = trace(Attention(), qkv(b, h, s, d), precision="bf16")
    # q, k, v and out of 2*4*128*32 bf16 (65536 bytes each), lse 2*4*128 fp32 (4096)
    assert fused.activation_bytes == 4 * 65536 + 4096
    math_path = trace(Attention(), qkv(b, h, s, d), precision="bf16", attention="math")
    assert math_path.activation_bytes >= b * h * s * s * 2  # the s x s probabilities


def test_grouped_query_attention_reads_fewer_key_value_heads():
    b, h, kv_heads, s, d = 1, 8, 2, 64, 32
    inputs = qkv(b, h, s, d, kv_heads=kv_heads)
    fwd, bwd = attention_rows(dlperf.analyze(Attention(enable_gqa=True), inputs, precision="bf16"))
    assert fwd.flops == 4 * b * h * s * s * d  # every query head does the full work
    q, kv = b * h * s * d * 2, b * kv_heads * s * d * 2  # 32768 and 8192 bytes
    assert fwd.bytes == q + 2 * kv + q + b * h * s * 4
    assert bwd.shapes[2] == [b, kv_heads, s, d]  # dK, dV keep the key heads


def test_a_learned_mask_gets_its_gradient_from_the_kernel():
    class Biased(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(1, 4, 64, 64))

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)

    a = dlperf.analyze(Biased(), qkv(2, 4, 64, 32), precision="bf16")
    (bwd,) = [r for r in attention_rows(a) if r.phase == "backward"]
    # the memory-efficient kernel (a mask rules out flash) writes the bias gradient
    assert (
        "attention: efficient, memory-efficient (cutlass) (flash takes no attention mask"
        in (bwd.notes[-1])
    )
    tensor, mask = 2 * 4 * 64 * 32 * 2, 4 * 64 * 64 * 2
    # reads dO, q, k, v, out, lse and the mask; writes dq, dk, dv and the mask's gradient
    assert bwd.bytes == (5 * tensor + 2 * 4 * 64 * 4 + mask) + (3 * tensor + mask)


def test_the_custom_op_computes_attention_on_real_tensors():
    from dlperf.tracing.attention import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    k2, v2 = (t[:, :2].detach().requires_grad_(True) for t in (k, v))
    for keys, values, gqa in ((k, v, False), (k2, v2, True)):
        out, lse = attention(q, keys, values, None, 0.0, True, None, gqa, "auto", True)
        expected = F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=gqa)
        torch.testing.assert_close(out, expected)
        grads = torch.autograd.grad(out.sum(), (q, keys, values))
        wanted = torch.autograd.grad(expected.sum(), (q, keys, values))
        for got, want in zip(grads, wanted, strict=True):
            torch.testing.assert_close(got, want)
    assert lse.shape == (2, 4, 16) and lse.dtype == torch.float32
    # a learned float mask, broadcast over the batch, gets its gradient too
    bias = torch.randn(1, 4, 16, 16, requires_grad=True)
    out, _ = attention(q, k, v, bias, 0.0, False, None, False, "auto", True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    got = torch.autograd.grad(out.sum(), (q, bias))
    want = torch.autograd.grad(expected.sum(), (q, bias))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


# -- the backend the dispatcher picks ----------------------------------------------


@pytest.mark.parametrize(
    "device, changes, backend, why",
    [
        ("a100", {}, "flash", "bf16, head size 64, no mask"),
        ("v100-sxm2-16gb", {"dtype": "fp16"}, "efficient", "flash needs an sm80+ GPU"),
        ("a100", {"dtype": "fp32"}, "efficient", "flash needs fp16/bf16"),
        ("a100", {"head_dim": 512, "value_dim": 512}, "efficient", "head sizes <= 256"),
        ("a100", {"mask": "float"}, "efficient", "flash takes no attention mask"),
        # sm86's smaller shared memory: no flash backward for head size 256 with dropout
        ("a10", {"head_dim": 256, "value_dim": 256}, "efficient", "no backward for head size"),
        ("v100-sxm2-16gb", {}, "math", "on sm70 needs fp16/fp32"),  # no bf16 before sm80
        ("a100", {"dtype": "fp64", "math_dtype": "fp64"}, "math", "needs fp16/bf16/fp32"),
        ("a100", {"causal": True, "kv_len": 2048}, "efficient", "equal query and key lengths"),
    ],
)
def test_backend_follows_pytorchs_dispatcher(device, changes, backend, why):
    chosen, reason = choose_backend(gpu(device), shape(**changes))
    assert chosen == backend and why in reason


def test_a_backend_the_gpu_cannot_run_is_refused_in_one_line():
    with pytest.raises(
        DlperfError,
        match=r"--attention flash cannot run on the v100-sxm2-16gb: .*sm70; use efficient or auto",
    ) as err:
        choose_backend(gpu("v100-sxm2-16gb"), shape(dtype="fp16"), "flash")
    assert "\n" not in str(err.value)
    # cuDNN takes dropout in steps of 1/16: 0.1 is refused, 0.125 runs
    with pytest.raises(DlperfError, match="steps of 1/16"):
        choose_backend(gpu("a100"), shape(), "cudnn")
    assert choose_backend(gpu("a100"), shape(dropout=0.125), "cudnn") == ("cudnn", "as requested")
    with pytest.raises(DlperfError, match="CUDA kernel"):
        choose_backend(spec_from_dict(fake_cpu_doc(1e10)), shape(), "efficient")


def test_cpu_runs_its_flash_kernel_unless_dropout():
    cpu = spec_from_dict(fake_cpu_doc(1e10))
    assert choose_backend(cpu, shape(dropout=0.0))[0] == "flash"
    assert choose_backend(cpu, shape()) == ("math", "PyTorch's CPU flash kernel takes no dropout")


def test_cpu_flash_computes_whole_key_blocks_of_its_query_blocks():
    from dlperf.kernels.attention import attention_efficiency, cpu_flash_useful_share

    # PyTorch's CPU kernel: at 128 queries, blocks of 32 rows, each against one key
    # block of all 128 keys (blocks of 512, computed whole): 128 x 128 scores
    # computed, 128 x 128 / 2 kept by the causal mask
    assert cpu_flash_useful_share(shape(q_len=128, kv_len=128)) == 0.5
    # at 1024, blocks of 256 rows: keys up to 256, 512, 768, 1024, rounded up to 512s,
    # 256 x (512 + 512 + 1024 + 1024) computed, 1024 x 1024 / 2 kept: 2/3
    assert cpu_flash_useful_share(shape(q_len=1024, kv_len=1024)) == pytest.approx(2 / 3)
    assert cpu_flash_useful_share(shape(q_len=1024, kv_len=1024, causal=False)) == 1.0
    # the probe's efficiency times that share, at any length: no GPU thread blocks
    doc = fake_cpu_doc(1e10, attention_flash_forward_efficiency=0.6)
    cpu = spec_from_dict(doc)
    for s in (128, 1024):
        one = shape(q_len=s, kv_len=s, dropout=0.0)
        assert attention_efficiency(cpu, one, "flash", 1e11) == pytest.approx(
            0.6 * cpu_flash_useful_share(one)
        )


def test_cpu_math_attention_draws_its_dropout_mask_per_score():
    # dropout makes a CPU run the math path; its mask is a random number per score,
    # drawn forward only: 2 x 4 heads x 128 x 128 = 131,072 at 1e8 a second = 1.31 ms
    q, k, v = qkv(2, 4, 128, 64)
    model = Attention(dropout_p=0.1, is_causal=True)

    def rows(**eff):
        spec = spec_from_dict(fake_cpu_doc(1e10, **eff))
        return attention_rows(dlperf.analyze(model, (q, k, v), gpu=spec, precision="fp32"))

    (f0, b0), (f1, b1) = rows(), rows(random_elements_per_s=1e8)
    assert f1.time_s - f0.time_s == pytest.approx(2 * 4 * 128 * 128 / 1e8)
    assert b1.time_s == b0.time_s


def test_hugging_face_models_without_sdpa_stay_eager():
    assert load_model("hf:mpt:layers=1").module.config._attn_implementation == "eager"
    with pytest.raises(DlperfError) as err:
        load_model("hf:mpt:layers=1", attention="flash")
    assert str(err.value) == "hf:mpt has no SDPA attention in transformers; use --attention eager"
    eager = load_model("hf:gpt2:layers=1", attention="eager").module
    assert eager.config._attn_implementation == "eager"


# -- its time ----------------------------------------------------------------------


def test_fused_time_is_launch_plus_math_over_waves_or_memory():
    a100 = gpu("a100")
    s = shape(bytes=50e6)
    timing = pricing.time(Cost(flops=s.flops, bytes_read=s.bytes, attention=(s,)), a100)
    # causal forward: 4 * 8 * 12 * 1024^2 * 64 / 2 = 12.88 GFLOP; thread blocks of 128 query
    # rows: 8 * 12 * 8 = 768 on 108 SMs, 8 waves keep 768 / 864 of the slots busy
    assert s.flops == 4 * 8 * 12 * 1024**2 * 64 / 2
    eff = a100.efficiency
    # FlashAttention-2's main loop, from the paper's figure at head size 128: each score's
    # exponential (16 per clock per SM: 16 x 108 x 1.41 GHz) runs after its 4 d FLOPs
    exp_rate = 16 * 108 * 1.41e9

    def exp_share(d, flops_per_score_and_d=4):
        return (1 / exp_rate) / (flops_per_score_and_d * d / 312e12)

    def efficiency(anchor, per_score=4):
        main = 1 / (1 / anchor - exp_share(128, per_score))
        # at head size 64; 1024 / 128 = 8 K/V steps per block, causal: 8 / (8 + 3)
        return 1 / (1 / main + exp_share(64, per_score)) * 8 / 11

    forward = efficiency(eff.attention["flash"].forward)
    math_s = s.flops / (312e12 * forward * 768 / 864)
    memory_s = 50e6 / (a100.memory_bandwidth_bytes_per_s * eff.dram_efficiency)
    assert timing.math_s == pytest.approx(math_s) and timing.memory_s == pytest.approx(memory_s)
    assert timing.seconds == pytest.approx(eff.kernel_latency_s + max(math_s, memory_s))
    assert timing.bound == "math"
    version = ".".join(map(str, torch_version(a100)[:2]))
    expected = f"attention: flash, FlashAttention-2 (sm80, torch {version}, bf16, head size 64, "
    assert timing.note == expected + "no mask)"
    # the backward is 2.5x the FLOPs (10 d per score) at the backward's lower efficiency,
    # over key blocks
    back = dataclasses.replace(s, phase="backward")
    slower = pricing.time(Cost(flops=back.flops, attention=(back,)), a100)
    ratio = 2.5 * forward / efficiency(eff.attention["flash"].backward, 10)
    assert slower.math_s / timing.math_s == pytest.approx(ratio)


def test_attention_is_a_small_share_of_a_gpt2_step():
    # the issue: priced as the CPU decomposition, attention was 60% of this step
    a = dlperf.analyze("hf:gpt2:layers=2", gpu="a100", precision="amp-bf16", batch=8, seq_len=1024)
    share = sum(r.time_s for r in attention_rows(a)) / a.time_s
    assert share < 0.25
    assert math.isclose(
        sum(r.flops for r in attention_rows(a)), 2 * 3.5 * 4 * 8 * 12 * 1024**2 * 64 / 2
    )
