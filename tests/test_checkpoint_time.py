"""Activation checkpointing in time and memory (`--checkpoint`): full and
every:K recompute each repeated block's forward in backward, selective only
the attention core (Korthikanti et al. 2022); one set of regions gives both
the recompute events and the activations kept."""

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analysis import analyze_trace
from dlperf.errors import DlperfError
from dlperf.ops import CostContext, costed
from dlperf.run import Session, resolve
from dlperf.tracing import trace, within
from dlperf.training_memory import (
    attention_cores,
    checkpoint_plan,
    core_saved_bytes,
    memory_report,
    parse_checkpoint,
    recompute_events,
    recompute_regions,
    with_recompute,
)

sys.path.insert(0, str(Path(__file__).parent))
from gpt_layer import GPT  # noqa: E402

transformers = pytest.importorskip("transformers")

# GPT-2 small's layer (hidden 768, 12 heads of 64), two layers, batch 2, 128 tokens
B, S, HIDDEN, HEADS, LAYERS = 2, 128, 768, 12, 2
D = HIDDEN // HEADS
T = B * S  # tokens


def gpt2_trace(attn: str):
    """hf:gpt2:layers=2 traced in amp-bf16 with transformers' `attn` attention
    ("eager": its own matmul-softmax-matmul; "sdpa": the fused kernel)."""
    config = transformers.GPT2Config(n_layer=LAYERS)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    ids = torch.zeros(B, S, dtype=torch.int64, device="meta")
    attention = "eager" if attn == "eager" else "auto"
    return trace(
        model, {"input_ids": ids, "labels": ids}, precision="amp-bf16", attention=attention
    )


@pytest.fixture(scope="module")
def eager():
    return gpt2_trace("eager")


@pytest.fixture(scope="module")
def fused():
    return gpt2_trace("sdpa")


def costs(tr, events):
    ctx = CostContext(tr.precision)
    return [costed(e, ctx).cost for e in events]


def gemm_flops(tr, events) -> float:
    return sum(g.flops for c in costs(tr, events) for g in c.gemms)


def in_blocks(tr, phase="forward"):
    return [
        e for e in tr.events if e.phase == phase and any(within(e.module, b) for b in tr.blocks)
    ]


def test_policies_parse_with_their_aliases():
    assert parse_checkpoint("none") == ("none", 1)
    assert parse_checkpoint("full") == parse_checkpoint("blocks") == ("full", 1)
    assert parse_checkpoint("selective") == ("selective", 1)
    assert parse_checkpoint("every:3") == ("every", 3)
    assert parse_checkpoint("sqrt") == ("sqrt", 1)
    for bad in ("every:0", "every:x", "sometimes", "every"):
        with pytest.raises(DlperfError) as err:
            parse_checkpoint(bad)
        message = str(err.value)
        assert "\n" not in message and "unknown checkpoint policy" in message
        assert "selective" in message and "every:K" in message


def test_full_recomputes_each_blocks_forward(eager):
    assert eager.blocks == ["transformer.h.0", "transformer.h.1"]
    again = recompute_events(eager, "full")
    forward = in_blocks(eager)
    assert all(e.phase == "recompute" for e in again)
    assert [(e.op, e.module) for e in sorted(again, key=lambda e: e.module)] == [
        (e.op, e.module) for e in sorted(forward, key=lambda e: e.module)
    ]
    # Each block's GEMMs: c_attn, attn c_proj, c_fc, mlp c_proj move the T tokens
    # through h x 3h, h x h, h x 4h and 4h x h weights: 2 T 12 h^2 = 24 T h^2;
    # Q K^T and P V are 2 b H s s d each: 4 b s^2 h. Two blocks:
    per_block = 24 * T * HIDDEN**2 + 4 * B * S * S * HIDDEN  # 3,623,878,656 + 100,663,296
    assert gemm_flops(eager, again) == 2 * per_block == 7_449_083_904
    # and every FLOP of the blocks' forward (the element-wise ops too), once more
    assert sum(c.flops for c in costs(eager, again)) == sum(c.flops for c in costs(eager, forward))


def test_recompute_runs_just_before_its_blocks_backward(eager):
    timeline = with_recompute(eager, "full")
    assert len(timeline) == len(eager.events) + len(in_blocks(eager))
    # the original events keep their order; no recompute before the loss's backward
    assert [e for e in timeline if e.phase != "recompute"] == eager.events
    first_backward = next(i for i, e in enumerate(timeline) if e.phase == "backward")
    assert all(e.phase != "recompute" for e in timeline[:first_backward])
    for block in reversed(eager.blocks):  # backward runs the last block first
        runs = [
            i for i, e in enumerate(timeline) if e.phase == "recompute" and within(e.module, block)
        ]
        assert runs == list(range(runs[0], runs[-1] + 1))  # one run, uninterrupted
        after = timeline[runs[-1] + 1]
        assert after.phase == "backward" and within(after.module, block)
        # ... and the block's backward has not begun before it
        assert not any(
            e.phase == "backward" and within(e.module, block) for e in timeline[: runs[0]]
        )


def test_every_k_recomputes_the_same_keeping_fewer_inputs(eager):
    full, every2 = recompute_events(eager, "full"), recompute_events(eager, "every:2")
    assert gemm_flops(eager, every2) == gemm_flops(eager, full)
    assert len(every2) == len(full)

    def bytes_of(policy):
        return checkpoint_plan(eager, policy).activations_bytes

    per_block = {
        b: sum(t.nbytes for t in eager.saved if t.kind == "activation" and within(t.module, b))
        for b in eager.blocks
    }
    outside = eager.activation_bytes - sum(per_block.values())
    block_input = B * S * HIDDEN * 4  # the fp32 residual stream: 786,432 B
    assert eager.module_inputs["transformer.h.0"] == block_input
    # full: both blocks' inputs kept, one block's activations back at a time
    assert bytes_of("full") == outside + 2 * block_input + max(per_block.values())
    # every:2: one segment of both blocks keeps one input, and brings both back
    assert bytes_of("every:2") == outside + block_input + sum(per_block.values())
    assert bytes_of("blocks") == bytes_of("full") and bytes_of("every:1") == bytes_of("full")
    assert bytes_of("sqrt") == bytes_of("every:2")  # ceil(sqrt(2 blocks)) = 2
    assert checkpoint_plan(eager, "every:2").segments == 1
    assert checkpoint_plan(eager, "full").segments == 2


def test_selective_recomputes_the_eager_attention_core(eager):
    cores = attention_cores(eager)
    assert len(cores) == LAYERS
    ops = [eager.events[i].op.split(".")[1] for i in cores[0]]
    # from Q K^T to the attention over V: scale, mask, softmax, its dropout
    assert ops[0] == ops[-1] == "bmm"
    assert "_softmax" in ops and "bernoulli_" in ops
    assert {eager.events[i].module for i in cores[0]} == {"transformer.h.0.attn"}
    again = recompute_events(eager, "selective")
    assert len(again) == sum(len(c) for c in cores)
    # only the two attention GEMMs: 2 b H s s d each, per layer
    assert gemm_flops(eager, again) == LAYERS * 2 * (2 * B * HEADS * S * S * D) == 201_326_592
    core_forward = [eager.events[i] for c in cores for i in c]
    assert sum(c.flops for c in costs(eager, again)) == sum(
        c.flops for c in costs(eager, core_forward)
    )
    # each core runs again just before its attention module's backward
    timeline = with_recompute(eager, "selective")
    for i, e in enumerate(timeline[:-1]):
        follows = timeline[i + 1]
        if e.phase == "recompute" and follows.phase != "recompute":
            assert follows.phase == "backward" and follows.module == e.module
    # Saved tensors it drops, per layer: the softmax output (fp32: autocast runs
    # softmax in fp32) b H s^2 x 4 B, the dropout mask b H s^2 x 1 B, the
    # dropped-out probabilities (bf16) b H s^2 x 2 B. Q, K, V stay.
    assert core_saved_bytes(eager) == [7 * B * HEADS * S * S] * LAYERS  # 2,752,512 each


def test_selective_with_fused_attention_recomputes_the_kernel(fused):
    cores = attention_cores(fused)
    assert len(cores) == LAYERS and all(len(c) == 1 for c in cores)
    kernels = [fused.events[c[0]] for c in cores]
    assert all(e.op.startswith("dlperf.attention") and e.phase == "forward" for e in kernels)
    again = recompute_events(fused, "selective")
    assert [(e.op, e.module, e.phase) for e in again] == [
        (e.op, e.module, "recompute")
        for e in reversed(kernels)  # in backward's order
    ]
    # The kernel saves q, k, v, its output and log-sum-exp; recomputing it drops
    # the output (b, H, s, d) in bf16 and the log-sum-exp (b, H, s) in fp32
    out, lse = B * HEADS * S * D * 2, B * HEADS * S * 4  # 393,216 + 12,288
    assert core_saved_bytes(fused) == [out + lse] * LAYERS


def test_selective_keeps_korthikanti_34sbh_per_layer():
    # Korthikanti et al. 2022, Table 2: selective recomputation keeps 34 s b h
    # bytes per layer (16-bit), dropping 5 a s^2 b: the softmax output (2 B),
    # the dropout mask (1 B) and the dropout output (2 B) per score.
    s, b, h, a, layers = 512, 4, 1024, 16, 4
    with torch.device("meta"):
        model = GPT(layers=layers, hidden=h, heads=a)
    tr = trace(model, torch.empty(s, b, h, device="meta"), precision="fp16")
    core = 5 * a * s * s * b  # 83,886,080
    assert core_saved_bytes(tr) == [core] * layers
    none = checkpoint_plan(tr, "none").activations_bytes
    selective = checkpoint_plan(tr, "selective").activations_bytes
    # all cores dropped, one brought back by backward at a time
    assert none - selective == (layers - 1) * core
    per_layer = (none - layers * core) / layers
    # the layer norms' mean and rstd are the only extra (2 norms x s b x 4 B)
    assert 0 < per_layer - 34 * s * b * h <= 2 * 2 * s * b * 4


def test_memory_ordering_none_selective_full(eager, fused):
    for tr in (eager, fused):
        sizes = {p: checkpoint_plan(tr, p).activations_bytes for p in ("none", "selective", "full")}
        assert sizes["none"] > sizes["selective"] >= sizes["full"]


def test_memory_report_recompute_is_the_analysis_recompute_phase():
    # one code path: the memory report prices the events the analysis runs
    run = resolve("hf:gpt2:layers=2", gpu="a100", precision="amp-bf16", batch=B, seq_len=S)
    session = Session()
    tr = session.trace(run)
    for policy in ("full", "selective"):
        timeline = dataclasses.replace(tr, events=with_recompute(tr, policy))
        phases = analyze_trace(timeline, run.spec).phases
        report = memory_report(run, session, policy)
        assert report.recompute_s > 0
        assert report.recompute_s == pytest.approx(phases["recompute"]["time_s"], rel=1e-12)
        what_if = {p.checkpoint: p for p in report.policies}
        assert what_if[policy].recompute_s == report.recompute_s
    assert memory_report(run, session, "none").recompute_s == 0


def test_memory_report_recompute_is_priced_compiled_under_compile():
    # --compile fuses the recomputed forward in the memory report as in the analysis
    session = Session()
    eager, compiled = (
        resolve("hf:gpt2:layers=2", gpu="a100", batch=B, seq_len=S, checkpoint="full", compile=c)
        for c in (False, True)
    )
    fused = session.analysis(compiled).phases["recompute"]["time_s"]
    report = memory_report(compiled, session, "full")
    assert report.recompute_s < memory_report(eager, session, "full").recompute_s
    # the report fuses the recompute events alone: where a later op reads one
    # of their outputs it cannot see, so it may write a little less than the
    # whole step's fusion; within 5% of the analysis's recompute phase
    assert report.recompute_s == pytest.approx(fused, rel=0.05)


class LSTMBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.rnn = nn.LSTM(width, width, batch_first=True)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + self.proj(self.rnn(x)[0])


def test_recompute_copies_cost_what_their_forward_costs(eager):
    model = nn.Sequential(LSTMBlock(32), LSTMBlock(32))
    lstm = trace(model, torch.randn(4, 10, 32), precision="fp32")
    assert lstm.blocks == ["0", "1"]
    for tr in (eager, lstm):
        again = recompute_events(tr, "full")
        originals = [dataclasses.replace(e, phase="forward") for e in again]
        assert costs(tr, again) == costs(tr, originals)
    assert any(e.op.startswith("dlperf.rnn") for e in recompute_events(lstm, "full"))


def test_inference_recomputes_nothing():
    model = GPT(layers=2, hidden=64, heads=4)
    tr = trace(model, torch.randn(16, 2, 64), training=False, precision="fp32")
    for policy in ("full", "selective", "every:2"):
        assert with_recompute(tr, policy) == tr.events
        assert checkpoint_plan(tr, policy, price=lambda events: math.inf).recompute_s == 0


# A one-layer DeepSeek-V3 (latent attention, a dense MLP): 4 heads, queries of
# 16 (no rotary) + 8 (rotary) = 24, values of 16, at batch 1 x 32 tokens.
LATENT = ("hf:deepseek_v3:layers=1,hidden=256,heads=4,kv_heads=4,vocab=512,mlp=512,"
          "q_lora_rank=64,kv_lora_rank=32,qk_nope_head_dim=16,qk_rope_head_dim=8,"
          "v_head_dim=16,first_k_dense_replace=1")  # fmt: skip


def test_selective_named_modules_recompute_what_megatron_names():
    """Megatron-Core's --recompute-modules (issue 35, item 2): each named region
    is dropped and run again in backward. mla_up_proj runs from the
    up-projections through rotary to q, k and v, the attention's inputs, which
    it drops; the down-projections stay."""
    session = Session()
    run = resolve(LATENT, gpu="h100", precision="amp-bf16", batch=1, seq_len=32)
    t = session.trace(run)
    (up,) = recompute_regions(t, "selective:mla_up_proj")
    modules = {t.events[i].module.rpartition(".")[2] for i in up}
    assert {"q_b_proj", "kv_b_proj"} <= modules and not modules & {"q_a_proj", "kv_a_proj_with_mqa"}
    (core,) = attention_cores(t)
    assert max(up) < core[0]  # it ends where the attention core begins
    # q and k: 1 x 4 heads x 32 tokens x 24, v: x 16, in bf16 (2 B), saved by the core
    qkv = 2 * (2 * 4 * 32 * 24 + 4 * 32 * 16)
    (dropped,) = core_saved_bytes(t, "selective:mla_up_proj")
    assert dropped >= qkv
    (mlp,) = recompute_regions(t, "selective:mlp")
    assert {t.events[i].module.rpartition(".")[2] for i in mlp} >= {"gate_proj", "down_proj"}
    norms = recompute_regions(t, "selective:layernorm")
    assert len(norms) == 2  # input and post-attention norms of the one layer
    # each policy keeps what it does not drop, plus its largest region back in backward
    policies = ("none", "selective:mla_up_proj", "selective:core_attn+mla_up_proj")
    kept = {p: checkpoint_plan(t, p).activations_bytes for p in policies}
    assert kept["none"] - kept["selective:mla_up_proj"] == 0  # one region: it comes back whole
    assert kept["selective:core_attn+mla_up_proj"] < kept["none"]
    with pytest.raises(DlperfError, match="moe_act is not a module dlperf recomputes"):
        parse_checkpoint("selective:core_attn+moe_act")


def test_named_modules_are_counted_once_and_must_exist():
    """A module named twice is one region (it was dropped twice: negative
    activations); a module the model lacks is refused, not priced as nothing."""
    from dlperf.training_memory import recompute_modules

    assert recompute_modules("selective:mlp+mlp+core_attn") == ("mlp", "core_attn")
    t = Session().trace(resolve("hf:gpt2:layers=2", gpu="a100", batch=1, seq_len=32))
    assert len(recompute_regions(t, "selective:layernorm")) == 4  # ln_1 and ln_2, 2 layers
    with pytest.raises(DlperfError, match="has no mla_up_proj"):
        recompute_regions(t, "selective:mla_up_proj")
