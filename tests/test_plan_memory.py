"""Memory per GPU of parallel plans, derived in the open: Korthikanti et al.
2022's activation formulas, ZeRO's shards, the pipeline schedules'
in-flight micro-batches, checkpointing, FSDP's gathered blocks."""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import DlperfError
from dlperf.parallel import Layout, ModelProfile, memory_per_gpu, parse_schedule, profile
from dlperf.parallel.memory import block_activations, stage_memory, zero_state_bytes
from dlperf.precision import compute_policy
from dlperf.run import Session, resolve
from dlperf.training_memory import framework_memory

sys.path.insert(0, str(Path(__file__).parent))
from gpt_layer import GPT  # noqa: E402

S, B, H, A = 512, 4, 1024, 16
SBH, AS2B = S * B * H, A * S * S * B  # 2,097,152 and 16,777,216
# The two layer norms' mean and rstd, s b values each in fp16, which the paper
# leaves out: 2 x 2 x 2048 x 2 B = 16,384 B, replicated.
LN_STATS = 2 * 2 * S * B * 2


@pytest.fixture(scope="module")
def gpt_profile() -> ModelProfile:
    with torch.device("meta"):
        model = GPT(layers=2, hidden=H, heads=A)
    # Megatron's (s, b, h) layout: the traced "micro-batch" is the first dimension
    run = resolve(model, torch.empty(S, B, H, device="meta"), gpu="a100", precision="fp16")
    return profile(run, Session(), S)


def test_the_trace_splits_a_gpt_layer_as_korthikanti_counts_it(gpt_profile):
    p = gpt_profile
    # Table 2, no parallelism: 34 s b h + 5 a s^2 b = 71,303,168 + 83,886,080
    assert p.block_activations_bytes == 34 * SBH + 5 * AS2B + LN_STATS
    # tensor parallelism splits 24 s b h and the attention scores; 10 s b h (the
    # layer norms' inputs, the linear inputs after them, two dropout masks) stay
    assert p.block_split_bytes == 24 * SBH + 5 * AS2B
    assert p.block_replicated_bytes == 10 * SBH + LN_STATS
    # selective recompute drops the softmax output, its dropout mask and output
    assert p.block_core_bytes == 5 * AS2B
    assert p.block_input_bytes == 2 * SBH  # full recompute keeps the layer's input
    assert p.boundary_elements == SBH
    assert p.kv_elements == 2 * SBH  # K and V, h per token each


@pytest.mark.parametrize("t", [2, 8])
def test_korthikanti_table_2_per_layer(gpt_profile, t):
    plain, sp = Layout(dp=1, tp=t, pp=1), Layout(dp=1, tp=t, pp=1, sequence_parallel=True)
    # tensor parallelism: s b h (10 + 24/t) + 5 a s^2 b / t
    kept, working = block_activations(gpt_profile, plain)
    assert kept == SBH * (10 + 24 / t) + 5 * AS2B / t + LN_STATS
    assert working == 0
    # with sequence parallelism: (34 s b h + 5 a s^2 b) / t
    kept, _ = block_activations(gpt_profile, sp)
    assert kept == pytest.approx((34 * SBH + 5 * AS2B + LN_STATS) / t)
    # selective recompute: s b h (10 + 24/t), one layer's scores come back at a time
    selective = dataclasses.replace(gpt_profile, checkpoint="selective")
    kept, working = block_activations(selective, plain)
    assert kept == SBH * (10 + 24 / t) + LN_STATS
    assert working == 5 * AS2B / t
    # selective with sequence parallelism: 34 s b h / t
    kept, _ = block_activations(selective, sp)
    assert kept == pytest.approx((34 * SBH + LN_STATS) / t)
    # full recompute keeps the input, 2 s b h (split by t under sequence
    # parallelism), and brings one whole layer back at a time
    full = dataclasses.replace(gpt_profile, checkpoint="full")
    kept, working = block_activations(full, plain)
    assert kept == 2 * SBH
    assert working == SBH * (10 + 24 / t) + 5 * AS2B / t + LN_STATS
    kept, _ = block_activations(full, sp)
    assert kept == 2 * SBH / t


def test_context_parallelism_splits_every_activation(gpt_profile):
    kept, _ = block_activations(gpt_profile, Layout(dp=1, tp=1, pp=1, cp=4))
    assert kept == (34 * SBH + 5 * AS2B + LN_STATS) / 4


def _profile(**changes) -> ModelProfile:
    base = dict(
        name="m",
        params=1_000_000_000,
        block_params=1_000_000_000,
        blocks=8,
        micro_batch=1,
        tokens_per_sample=0,
        precision="amp-bf16",
        optimizer="adamw",
        block_activations_bytes=1e8,
        block_split_bytes=0.0,
        block_input_bytes=1e6,
    )
    base.update(changes)
    return ModelProfile(**base)


def test_zero_states_match_the_zero_paper():
    # Rajbhandari et al.: mixed-precision Adam keeps 2 + 2 + K bytes per
    # parameter, K = 12 (fp32 master weights, momentum, variance), the
    # gradients reduced in fp16 as DeepSpeed does (--reduce-dtype bf16 here)
    p, psi, nd = _profile(reduce_bytes=2), 7.5e9, 64
    assert zero_state_bytes(p, 1, nd, psi) == (2 * psi, 2 * psi, 12 * psi / nd)
    assert zero_state_bytes(p, 2, nd, psi) == (2 * psi, 2 * psi / nd, 12 * psi / nd)
    assert zero_state_bytes(p, 3, nd, psi) == (2 * psi / nd, 2 * psi / nd, 12 * psi / nd)
    # the paper's figure 1, 7.5B parameters on 64 GPUs: 31.4, 16.6 and 1.9 GB
    assert sum(zero_state_bytes(p, 1, nd, psi)) / 1e9 == pytest.approx(31.4, abs=0.05)
    assert sum(zero_state_bytes(p, 2, nd, psi)) / 1e9 == pytest.approx(16.6, abs=0.05)
    assert sum(zero_state_bytes(p, 3, nd, psi)) == pytest.approx(1.875e9)
    # FSDP2's default reduces (and keeps) the sharded gradients in fp32: 4 B each
    fp32 = _profile()
    assert zero_state_bytes(fp32, 3, nd, psi)[1] == 4 * psi / nd
    assert zero_state_bytes(fp32, 1, nd, psi)[1] == 2 * psi  # zero1: backward's own, whole


def test_states_per_precision_and_sharding():
    psi = 1e9
    # FSDP "PURE" bf16: bf16 weights and gradients (reduced in bf16), an fp32 master
    # and fp32 moments, all sharded: (2 + 2 + 4 + 8) / 8 = 2 B per parameter on 8 GPUs
    pure = _profile(precision="bf16", reduce_bytes=2)
    assert sum(zero_state_bytes(pure, 3, 8, psi)) == 16 * psi / 8
    # reduced in fp32 (FSDP2's default): the sharded gradients are fp32, (2 + 4 + 12) / 8
    assert sum(zero_state_bytes(_profile(precision="bf16"), 3, 8, psi)) == 18 * psi / 8
    # unsharded bf16: torch.optim keeps its moments in the weights' dtype, 2 + 2 + 2 x 2
    assert zero_state_bytes(_profile(precision="bf16"), 0, 1, psi) == (2 * psi, 2 * psi, 4 * psi)
    # unsharded AMP: fp32 master + bf16 copy (6), fp32 gradients (4), fp32 moments (8)
    assert zero_state_bytes(_profile(), 0, 1, psi) == (6 * psi, 4 * psi, 8 * psi)
    # fp32 under ZeRO: 4 + 4 bytes and K = 8 (no separate master)
    assert zero_state_bytes(_profile(precision="fp32"), 1, 4, psi) == (4 * psi, 4 * psi, 2 * psi)


def test_hsdp_shards_within_a_node():
    at = Layout(dp=16, tp=1, pp=1, sharding="hsdp", gpus_per_node=8)
    assert (at.shard_ranks, at.replicas) == (8, 2)
    at = Layout(dp=16, tp=2, pp=1, sharding="hsdp", gpus_per_node=8)
    assert (at.shard_ranks, at.replicas) == (4, 4)  # 8 GPUs per node / tp 2
    assert Layout(dp=16, tp=1, pp=1, sharding="fsdp").shard_ranks == 16


def test_the_optimizer_is_sharded_over_data_and_context_parallel_ranks():
    # Megatron-Core's distributed optimizer shards over its dp x cp group (the cp
    # ranks hold the same weights and reduce the same gradients): 1e9 parameters
    # in 8 blocks on pp 2, tp 2 -> 2.5e8 a GPU; dp 4 x cp 2 = 8 shards of K = 12 B:
    # 12 x 2.5e8 / 8 = 3.75e8 B (3.75e8 x 2 = 7.5e8 sharded over dp alone)
    spec = dlperf.gpu("h100")
    at = Layout(dp=4, tp=2, pp=2, cp=2, sharding="zero1", schedule=parse_schedule("1f1b"))
    assert (at.shard_ranks, at.state_shards) == (4, 8)
    mem = memory_per_gpu(_profile(), spec, at)
    assert mem.optimizer_bytes == 12 * 2.5e8 / 8
    assert mem.weights_bytes == 2 * 2.5e8  # the bf16 weights are whole on each
    # hsdp keeps its node's shards; no sharding, none
    assert Layout(dp=16, tp=1, pp=1, cp=2, sharding="hsdp").state_shards == 4
    assert Layout(dp=4, tp=1, pp=1, cp=2).state_shards == 1


def test_schedules_hold_their_micro_batches_in_flight():
    # 4 stages, 8 micro-batches
    assert parse_schedule("1f1b").in_flight(4, 8) == 4  # stage 1 holds p
    assert parse_schedule("1f1b").in_flight(4, 8, stage=3) == 1  # the last holds one
    assert parse_schedule("gpipe").in_flight(4, 8) == 8  # all m
    # interleaved, V = 2: p (1 + (p - 1)/(p V)) = 4 x (1 + 3/8) = 5.5
    assert parse_schedule("interleaved:2").in_flight(4, 8) == 5.5
    # the bubble: (p - 1)/(m V)
    assert parse_schedule("1f1b").bubble_share(4, 8) == 3 / 8
    assert parse_schedule("interleaved:2").bubble_share(4, 8) == 3 / 16


@pytest.mark.parametrize(
    ("schedule", "in_flight"), [("1f1b", 4), ("gpipe", 8), ("interleaved:2", 5.5)]
)
def test_first_stage_activations_per_schedule(schedule, in_flight):
    spec = dlperf.gpu("h100")
    p = _profile(allocator_share=0.03)
    at = Layout(dp=1, tp=1, pp=4, schedule=parse_schedule(schedule), micro_batches=8)
    first = stage_memory(p, spec, at, "first")
    # 8 blocks over 4 stages: 2 blocks of 1e8 bytes per micro-batch in flight
    assert first.activations_bytes == in_flight * 2 * 1e8
    framework = framework_memory("hopper")
    fixed = framework.cuda_context_bytes + framework.cublas_workspace_bytes
    # the allocator's reserve: the profile's share of the activations and transient
    reserve = 0.03 * (first.activations_bytes + first.transient_bytes)
    assert first.overhead_bytes == pytest.approx(fixed + reserve)


def test_fsdp_holds_two_gathered_blocks_and_one_block_of_gradients():
    spec = dlperf.gpu("a100")
    # 8 blocks of 1e8 parameters, 2e8 outside them (embeddings), bf16 math
    p = _profile(params=1_000_000_000, block_params=800_000_000, pre_params=200_000_000)
    at = Layout(dp=8, tp=1, pp=1, sharding="fsdp")
    mem = memory_per_gpu(p, spec, at)
    # 2 prefetched blocks x 1e8 x 2 B, one block of gradients cast to the fp32 reduce
    # dtype (1e8 x 4 B), and the root unit gathered: 2e8 x 2 B
    assert mem.buffers_bytes == 2 * 1e8 * 2 + 1e8 * 4 + 2e8 * 2
    bf16 = memory_per_gpu(dataclasses.replace(p, reduce_bytes=2), spec, at)
    assert mem.buffers_bytes - bf16.buffers_bytes == 1e8 * (4 - 2)
    assert mem.weights_bytes == 2 * 1e9 / 8 and mem.optimizer_bytes == 12 * 1e9 / 8
    # DDP's buckets copy the gradients (fp32 under AMP)
    ddp = memory_per_gpu(p, spec, Layout(dp=8, tp=1, pp=1))
    assert ddp.buffers_bytes == ddp.gradients_bytes == 4 * 1e9


def test_the_loss_transient_is_split_by_a_vocabulary_parallel_head():
    spec = dlperf.gpu("h100")
    # a head whose logits lie in split regions: its backward working set splits by tp
    p = _profile(post_transient_bytes=8e9, post_activations_bytes=4e9, post_split_bytes=4e9)
    one = memory_per_gpu(p, spec, Layout(dp=1, tp=1, pp=1))
    four = memory_per_gpu(p, spec, Layout(dp=1, tp=4, pp=1))
    assert one.transient_bytes == 8e9 and four.transient_bytes == 2e9
    assert one.activations_bytes - four.activations_bytes == pytest.approx(
        (1e8 * 8 + 4e9) - (1e8 * 8 + 1e9)  # replicated blocks; the logits split by 4
    )


def test_the_loss_holds_tokens_x_vocabulary():
    run = resolve(
        "hf:gpt2:n_layer=2,n_embd=64,n_head=2,vocab_size=1000",
        gpu="a100",
        batch=2,
        seq_len=32,
        precision="amp-bf16",
    )
    p = profile(run, Session(), 2)
    tokens, vocab = 2 * 32, 1000
    # Hugging Face's causal-LM loss upcasts the logits to fp32 and saves the
    # log-softmax: 64 x 1000 x 4 B = 256,000 B, in the split (vocabulary-parallel) region
    log_softmax = tokens * vocab * 4
    assert log_softmax <= p.post_split_bytes <= p.post_activations_bytes
    # beside it only the final norm's fp32 input and the head's bf16 input (64 x 64 x 6 B)
    # and their statistics
    assert p.post_activations_bytes - log_softmax < tokens * 64 * 6 + 2048
    # its backward holds the incoming gradient and its own output: twice the log-softmax
    assert p.post_transient_bytes == 2 * log_softmax


@pytest.mark.parametrize("sharding", ["fsdp", "zero1", "zero2"])
def test_sharded_mixed_precision_runs_in_the_compute_dtype(sharding):
    # issue 23, item 4: FSDP's mixed precision casts the gathered weights to bf16
    # and runs without autocast; issue 35: so do ZeRO-1/2 (Megatron's distributed
    # optimizer runs its Float16Module, DeepSpeed's bf16 engine a bf16 module).
    # An amp-bf16 plan's sharded layout is priced from the bf16 trace (no fp32
    # residual stream, no fp32 casts beside each linear): its activations and
    # forward-backward are those of --precision bf16, its states the policy's
    # (the same under ZeRO: bf16 weights, fp32 sharded masters and moments)
    common = dict(gpu="h100", gpus=8, micro_batch=2, seq_len=256, dp=8, tp=1, pp=1)
    common.update(checkpoint="none", sharding=sharding)
    model = "hf:gpt2:layers=2,hidden=256,heads=4"
    amp = dlperf.plan(model, precision="amp-bf16", **common).best
    pure = dlperf.plan(model, precision="bf16", **common).best
    assert amp.memory.activations_bytes == pure.memory.activations_bytes
    assert amp.memory.optimizer_bytes == pure.memory.optimizer_bytes
    # under DDP the same policy keeps autocast's fp32 tensors: more activations
    ddp = dict(common, sharding="none")
    assert dlperf.plan(model, precision="amp-bf16", **ddp).best.memory.activations_bytes > (
        amp.memory.activations_bytes
    )


def test_fp8_zero1_runs_fp8_gemms_on_the_bf16_model():
    # fp8 under ZeRO-1 (Megatron's distributed optimizer with Transformer
    # Engine): the bf16 model's activations, as --precision bf16 saves them,
    # and its linear GEMMs still on fp8 Tensor Cores: a faster step than bf16
    common = dict(gpu="h100", gpus=8, micro_batch=2, seq_len=1024, dp=8, tp=1, pp=1)
    common.update(checkpoint="none", sharding="zero1")
    model = "hf:llama:layers=2,hidden=2048,heads=16,kv_heads=4,mlp=8192,vocab=32000"
    fp8 = dlperf.plan(model, precision="fp8", **common).best
    bf16 = dlperf.plan(model, precision="bf16", **common).best
    assert fp8.memory.activations_bytes == bf16.memory.activations_bytes
    assert fp8.step_time_s < bf16.step_time_s


def test_reduce_dtype_is_refused_where_no_gradient_is_reduced():
    with pytest.raises(DlperfError, match="one GPU's step reduces none"):
        dlperf.memory("hf:gpt2:layers=1", reduce_dtype="bf16")
    with pytest.raises(DlperfError, match="unknown --reduce-dtype"):
        dlperf.plan("hf:gpt2:layers=1", reduce_dtype="fp8")


TE_LLAMA = "hf:llama:layers=2,hidden=256,heads=4,kv_heads=2,mlp=512,vocab=1000"


@pytest.mark.parametrize(("precision", "expected"), [("bf16", 1_726_464), ("fp8", 1_529_856)])
def test_transformer_engine_kernels_save_what_megatron_saves(precision, expected):
    # issue 35: a Llama block as Megatron-Core with Transformer Engine saves it,
    # h 256, kv 128 (2 of 4 heads of 64), ffn 512, 2 x 128 = 256 tokens, bf16:
    #   two norms' inputs 2 x 2 h T = 262,144 and fp32 rstd 2 x 4 T = 2,048
    #   the norms' outputs the QKV and gate/up GEMMs read, 2 x 2 h T = 262,144
    #   attention's Q 2 h T, K and V 2 kv T each, O 2 h T = 393,216; its fp32
    #   statistics 4 heads x 4 T = 4,096; RoPE's cos and sin (128 x 64 bf16,
    #   16,384 each) shared by the 2 blocks: 16,384 a block
    #   SwiGLU's inputs (gate and up outputs) 2 x 2 f T = 524,288, fc2's input 2 f T = 262,144
    # = 1,726,464 (the model's own ops: 2,512,896, with an fp32 copy and the
    # normalised values in each norm and silu(gate) besides). Under fp8 the
    # linear layers keep their fp8 input: the two norm outputs and fc2's input
    # halve (-131,072 - 131,072) and the output projection's fp8 copy of O
    # joins attention's bf16 one (+65,536): 1,529,856
    run = resolve(TE_LLAMA, gpu="h100", precision=precision, batch=2, seq_len=128,
                  attention="cudnn", kernels="te")  # fmt: skip
    if precision == "fp8":  # as a ZeRO plan runs it: fp8 GEMMs on the bf16 model
        run = dataclasses.replace(run, precision=compute_policy(run.spec, run.precision))
    assert profile(run, Session(), 2).block_activations_bytes == expected
    eager = resolve(TE_LLAMA, gpu="h100", precision="bf16", batch=2, seq_len=128,
                    attention="cudnn")  # fmt: skip
    assert profile(eager, Session(), 2).block_activations_bytes == 2_512_896


def test_kernels_te_is_refused_for_inference():
    with pytest.raises(DlperfError, match="--kernels te is what a training step saves"):
        dlperf.memory("hf:gpt2:layers=1", kernels="te", training=False)


def test_offloaded_blocks_keep_their_activations_in_host_memory():
    """issue 35: Megatron-Core's activation offloading (--cpu-offloading-num-layers),
    which NVIDIA's GB200 recipes use (70B with 40 of its 80 layers offloaded), was not
    priced: those runs were judged not to fit. At the end of forward the first N
    blocks' activations are in host memory."""
    spec = dlperf.gpu("gb200-nvl72-186gb")
    at = Layout(dp=8, tp=1, pp=1)
    held = {n: stage_memory(_profile(offload_layers=n), spec, at, "only").activations_bytes
            for n in (0, 3, 7)}  # fmt: skip
    # 8 blocks of 1e8 bytes: 8, 5 and 1 of them on the GPU
    assert [held[n] for n in (0, 3, 7)] == [8e8, 5e8, 1e8]


def test_an_offload_copy_longer_than_a_block_shows_by_the_difference():
    from dlperf.parallel.compute import offload_exposed_s

    at = Layout(dp=8, tp=1, pp=1)
    # 3 of 8 blocks of 1e8 bytes over a 1e10 B/s link: 10 ms each way
    p = _profile(offload_layers=3, host_bytes_per_s=1e10)
    # a block's forward (4 ms) hides 4 of the 10 ms out, its backward (8 ms) 8 of the
    # 10 back: 3 x (6 + 2) = 24 ms
    assert offload_exposed_s(p, at, 4e-3, 8e-3) == pytest.approx(24e-3)
    assert offload_exposed_s(p, at, 20e-3, 40e-3) == 0.0  # hidden entirely


def test_offloading_is_refused_where_megatron_refuses_it():
    model = "hf:llama:layers=4,hidden=128,heads=4,kv_heads=2,mlp=256,vocab=1000"
    common = dict(gpu="gb200-nvl72-186gb", gpus=4, global_batch=4, offload_layers=2)
    for extra, message in (
        ({"pp": 2}, "only without pipelining"),
        ({"checkpoint": "full"}, "offloads or recomputes, not both"),
        ({"cuda_graphs": True}, "captures no offloading step"),
    ):
        with pytest.raises(DlperfError, match=message):
            dlperf.plan(model, **common, **extra)
    with pytest.raises(DlperfError, match="give at most 3"):
        dlperf.plan(model, **{**common, "offload_layers": 4})
    with pytest.raises(DlperfError, match="give it to dlperf plan"):
        dlperf.memory(model, offload_layers=2)
    report = dlperf.plan(model, **common)
    assert all(p.pp == 1 and p.offload_layers == 2 for p in report.plans)
    assert report.plans[0].name.endswith("-offload:2")


def test_expert_parallelism_across_the_tp_gpus_keeps_whole_experts():
    """issue 35: NVIDIA's Qwen3-235B runs set ep 32 over dp 16 x tp 2 (expert tensor
    parallelism 1); dlperf refused any ep not dividing dp. 8 blocks of 1e9
    parameters, 0.75e9 of them experts (8 experts a block), dp 4, tp 2:"""
    spec = dlperf.gpu("h100")
    p = _profile(params=8e9, block_params=8e9, expert_params=6e9, experts=8, moe_layers=8,
                 top_k=2)  # fmt: skip
    etp1 = Layout(dp=4, tp=2, pp=1, ep=8, sharding="zero1", sequence_parallel=True)
    etp2 = Layout(dp=4, tp=2, pp=1, ep=4, sharding="zero1", sequence_parallel=True)
    assert (etp1.expert_tp, etp2.expert_tp) == (1, 2)
    # ETP 1: dense 2e9 / tp 2 = 1e9 and experts 6e9 / ep 8 = 0.75e9, whole; ETP = TP:
    # experts 6e9 / (ep 4 x tp 2) = 0.75e9 as well; bf16 weights, 2 B each: 3.5e9 B
    for at in (etp1, etp2):
        assert stage_memory(p, spec, at, "only").weights_bytes == pytest.approx(1.75e9 * 2)
    # the experts' Adam states (fp32 master and moments, 12 B) shard over the
    # expert-data-parallel ranks: dp x tp / (ep x ETP) = 4 x 2 / 8 = 1 (ETP 1), 4 x 2 /
    # (4 x 2) = 1 (ETP 2); the dense ones over dp 4
    assert etp1.expert_state_shards == etp2.expert_state_shards == 1
    optimizer = 12 * (1e9 / 4 + 0.75e9 / 1)
    assert stage_memory(p, spec, etp1, "only").optimizer_bytes == pytest.approx(optimizer)
    from dlperf.parallel.search import problem

    dims = dict(dp=4, tp=2, pp=1, cp=1, ep=8, sharding="zero1",
                schedule=parse_schedule("none"), sequence_parallel=False)  # fmt: skip
    assert "needs sequence parallelism" in problem(p, 8, 32, dims, 1024)
    assert problem(p, 8, 32, {**dims, "sequence_parallel": True}, 1024) is None
    assert "divide" in problem(p, 8, 32, {**dims, "ep": 3}, 1024)  # 8 experts, dp x tp 8


def test_interleaving_counts_the_embedding_and_the_loss_as_a_virtual_stage_each():
    """issue 35: NVIDIA runs Llama-3.1 405B's 126 blocks at pp 16 x V 8 = 128 virtual
    stages (Megatron-Core's account_for_embedding/loss_in_pipeline_split); dlperf
    refused the plan, saying m must be a multiple of pp, which it was (384 / 16)."""
    from dlperf.parallel.search import problem

    schedule = parse_schedule("interleaved:8")
    assert schedule.allows(16, 384, 126)  # 126 + 2 = 128 = 16 x 8
    assert not schedule.allows(16, 384, 125)
    p = _profile(blocks=125)
    dims = dict(dp=1, tp=1, pp=16, cp=1, ep=1, sharding="none", schedule=schedule,
                sequence_parallel=False)  # fmt: skip
    why = problem(p, 16, 384, dims, 0)
    assert "128 virtual stages" in why and "multiple of pp" not in why


# A DeepSeek-V3 layer of 2 heads: qk_nope 32, rope 16, v 32 (the Hugging Face
# code takes its value as a slice of kv_b_proj's output, (k_nope, v) per head)
TE_MLA = ("hf:deepseek_v3:layers=1,hidden=256,heads=2,kv_heads=2,vocab=1000,mlp=512,"
          "q_lora_rank=64,kv_lora_rank=32,qk_nope_head_dim=32,qk_rope_head_dim=16,"
          "v_head_dim=32,first_k_dense_replace=1")  # fmt: skip


def test_transformer_engine_kernels_keep_latent_attentions_value_alone():
    """issue 35: Megatron-Core makes the attention's Q, K and V contiguous
    before the fused kernel, so DeepSeek-V3's value is a tensor of its own.
    The Hugging Face code passes it as a slice of kv_b_proj's output, and the
    saved view held the whole output: (k_nope + v) per head where Megatron
    keeps v (128 MiB of 256 a layer at DeepSeek-V3's sizes and 4,096 tokens)."""
    from dlperf.checkpointing import attention_cores
    from dlperf.training_memory.report import saved_as_run

    kw = dict(gpu="h100", precision="bf16", batch=2, seq_len=64, attention="cudnn")
    runs = {k: resolve(TE_MLA, kernels=k, **kw) for k in ("te", "eager")}
    traced = Session().trace(runs["te"])
    (core,) = [traced.events[c[0]] for c in attention_cores(traced)]
    value = core.reads[2]

    def saved(kernels: str) -> int:
        kept = saved_as_run(traced, runs[kernels]).saved
        return sum(t.nbytes for t in kept if t.storage == value)

    # kv_b_proj's output: 2 x 64 tokens x 2 heads x (32 + 32) x 2 B = 32,768 bytes;
    # the value alone: 2 x 64 x 2 x 32 x 2 B = 16,384
    assert saved("eager") == 32_768
    assert saved("te") == 16_384
