"""`dlperf serve`: LLM inference with a KV cache, on tiny decoders traced on
fake tensors. Expected values are derived in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import DlperfError
from dlperf.run import Session, resolve
from dlperf.run_config import RunConfig
from dlperf.serving import serve
from dlperf.serving.collectives import collective_time_s
from dlperf.serving.deployment import deploy
from dlperf.serving.result import linear_rows
from dlperf.serving.timeline import decode_points, mean_decode_s, micro_batches

# GPT-2 shaped: 2 layers, hidden 128, 4 heads of 32, MLP 512, vocab 50257, 1024 positions.
GPT = "hf:gpt2:layers=2,n_embd=128,n_head=4"
HIDDEN, LAYERS, HEADS, HEAD_DIM, VOCAB = 128, 2, 4, 32, 50257
# Its linear layers per block: c_attn 128x384, attn.c_proj 128x128, c_fc 128x512,
# mlp.c_proj 512x128 = 49152 + 16384 + 65536 + 65536 = 196608 weights.
BLOCK_LINEAR_WEIGHTS = 128 * 384 + 128 * 128 + 128 * 512 + 512 * 128
# Llama shaped with grouped-query attention: 4 query heads, 2 KV heads of 32.
LLAMA = "hf:llama:layers=2,hidden=128,heads=4,kv_heads=2,mlp=256,vocab=1000"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def session():
    return Session()


@pytest.fixture(scope="module")
def gpt(session):
    return serve(GPT, gpu="a100", input_len=16, output_len=5, batch=3, session=session)


@pytest.fixture(scope="module")
def gpt_tp2(session):
    return serve(GPT, gpu="a100", input_len=16, output_len=5, batch=3, tp=2, session=session)


def test_kv_cache_bytes_per_token(gpt, session):
    # layers x 2 (K and V) x kv_heads x head_dim x bytes = 2 x 2 x 4 x 32 x 2 = 1024
    assert gpt.kv_cache_bytes_per_token == LAYERS * 2 * HEADS * HEAD_DIM * 2 == 1024
    llama = serve(LLAMA, gpu="a100", input_len=8, output_len=3, batch=2, tp=2, session=session)
    # grouped-query: 2 KV heads, not 4: 2 x 2 x 2 x 32 x 2 = 512; tp 2 keeps one each: 256
    assert llama.kv_cache_bytes_per_token == 2 * 2 * 2 * 32 * 2 == 512
    assert llama.kv_cache_bytes_per_token_per_gpu == 256
    fp8 = serve(GPT, gpu="h100", input_len=16, output_len=5, batch=3, kv_cache_dtype="fp8")
    assert fp8.kv_cache_bytes_per_token == 512  # 1 B per element
    # the cache holds prompt + output tokens of every sequence, in whole blocks of 16:
    # 16 + 5 = 21 tokens take 2 blocks, 32 slots: 1024 x 32 x 3
    assert gpt.memory["kv_cache_bytes"] == 1024 * 32 * 3


def test_decode_flops_per_step(gpt):
    step = gpt.decode
    # linear layers: 2 FLOPs per weight per token, batch 3 -> 2 x 196608 x 2 layers x 3,
    # plus the LM head over the vocabulary: 2 x 128 x 50257 x 3
    linear = 2 * BLOCK_LINEAR_WEIGHTS * LAYERS * 3 + 2 * HIDDEN * VOCAB * 3
    assert step.extra["linear_flops"] == linear
    # attention over the cache (the middle step: 16 + 1 cached, + the new token = 19 keys):
    # Q K^T and P V, 2 x 2 x b x h x L x d = 4 x 3 x 4 x 19 x 32 per layer
    cached = gpt.decode.extra["cached_tokens"][1]
    assert step.extra["attention_flops"] == 4 * 3 * HEADS * (cached + 1) * HEAD_DIM * LAYERS
    # the rest (norms, GELU, sampling) is small: ~ 2 x params x batch + attention
    assert step.flops == pytest.approx(linear + step.extra["attention_flops"], rel=0.3)


def test_weight_bytes_per_step(gpt, gpt_tp2, session):
    # every linear weight once per step, 2 B each, LM head included
    weights = (BLOCK_LINEAR_WEIGHTS * LAYERS + HIDDEN * VOCAB) * 2
    assert gpt.decode.weight_bytes == weights
    # tensor parallel: each GPU reads half of every matrix (the vocabulary split as
    # ceil(50257 / 2) = 25129 columns)
    assert gpt_tp2.decode.weight_bytes == (BLOCK_LINEAR_WEIGHTS * LAYERS / 2 + HIDDEN * 25129) * 2
    int4 = serve(GPT, gpu="a100", precision="int4-weight", input_len=16, output_len=5, batch=3)
    # int4 weights with a 16-bit scale and zero per 128: 0.5 + 4/128 B in the blocks;
    # the LM head fp16
    per = 0.5 + 4 / 128
    assert int4.decode.weight_bytes == BLOCK_LINEAR_WEIGHTS * LAYERS * per + HIDDEN * VOCAB * 2


def test_tp_all_reduces(gpt_tp2):
    rows = gpt_tp2.decode.extra["collectives"]
    reduces = [c for c in rows if c["op"] == "nccl.all_reduce"]
    # two per layer (after attention and after the MLP), each of b x tokens x hidden x 2 B
    assert len(reduces) == 2 * LAYERS
    assert all(c["bytes"] == 3 * 1 * HIDDEN * 2 for c in reduces)
    # the LM head's logits are gathered before sampling: b x vocab x 2 B
    gathers = [c for c in rows if c["op"] == "nccl.all_gather"]
    assert [c["bytes"] for c in gathers] == [3 * VOCAB * 2]


def test_weight_only_int4_speeds_up_weight_bound_decode(session):
    # hidden 4096: c_fc alone is 4096 x 16384 x 2 B = 134 MB, read once per step at batch 1
    big = "hf:gpt2:layers=2,n_embd=4096,n_head=32,vocab_size=1024"
    fp16 = serve(big, gpu="a100", input_len=8, output_len=2, batch=1, session=session)
    int4 = serve(
        big,
        gpu="a100",
        precision="int4-weight",
        input_len=8,
        output_len=2,
        batch=1,
        session=session,
    )
    assert "weight-read bound" in fp16.notes[0]
    # blocks: 2 x (4096 x 12288 + 4096 x 4096 + 2 x 4096 x 16384) weights at 0.5 + 4/128 B
    # (a 16-bit scale and zero per 128), the 1024-word LM head (4096 x 1024) at 2 B,
    # against all of them at 2 B
    blocks, head = 2 * (4096 * 12288 + 4096 * 4096 + 2 * 4096 * 16384), 4096 * 1024
    assert int4.decode.weight_bytes == blocks * (0.5 + 4 / 128) + head * 2
    assert fp16.decode.weight_bytes == (blocks + head) * 2  # ratio 0.27

    def linear_s(report):
        return sum(o["time_s"] for o in report.decode.top_ops if o["op"].endswith("mm.default"))

    # the linear layers stream about a quarter of the bytes, then dequantize on CUDA
    # cores in turn (kernels.quantized): under half the time
    assert linear_s(int4) < 0.5 * linear_s(fp16)
    assert int4.tpot_s < 0.6 * fp16.tpot_s


def test_request_times_add_up(gpt):
    # FasterTransformer's loop: the prompt's forward gives token 1, then O - 1 decode steps
    assert gpt.latency_s == pytest.approx(gpt.ttft_s + (5 - 1) * gpt.tpot_s)
    assert gpt.output_tokens_per_s == pytest.approx(3 * 5 / gpt.latency_s)
    assert gpt.fits and gpt.max_batch > 3


def test_decode_interpolation():
    # cache lengths 16 .. 16 + 5 - 2 = 19: traced at 16, 17 and 19
    assert decode_points(16, 5) == [16, 17, 19]
    # linear in the cache length: the mean of f(16..19) with f(L) = L is 17.5
    assert mean_decode_s([16, 17, 19], [16.0, 17.0, 19.0], 16, 5) == pytest.approx(17.5)


def test_pipeline_micro_batches():
    # FasterTransformer: b/pp when it divides, halved while a micro-batch holds > 1024 tokens
    assert micro_batches(8, 1, 2) == 2  # decode: 4 sequences each
    assert micro_batches(8, 1024, 2) == 8  # 4 x 1024 > 1024 -> 2 x 1024 > 1024 -> 1
    assert micro_batches(3, 1, 2) == 1  # 2 does not divide 3
    assert micro_batches(8, 1, 1) == 1


def test_small_all_reduce_against_llmcompass():
    # LLMCompass measured 12.52 us for an 8-byte all-reduce over 4 NVLink A100s
    # (../shared/data/llmcompass/allreduce.csv): launch 6.0 us + NCCL's ring LL 6.4 us
    assert collective_time_s("all_reduce", 8, 4, dlperf.gpu("a100")) == pytest.approx(
        12.52e-6, rel=0.05
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_len": 0}, "--input-len must be a positive"),
        ({"output_len": -1}, "--output-len must be a positive"),
        ({"precision": "fp8"}, "no fp8 Tensor Cores"),
        ({"batch": 10**7}, "largest batch that fits is"),  # 10^7 x 32 kB of cache
        ({"kv_cache_dtype": "fp4"}, "unknown --kv-cache-dtype"),
    ],
)
def test_bad_input_is_one_line(kwargs, message, session):
    options = {"gpu": "a100", "input_len": 16, "output_len": 4, "batch": 1, **kwargs}
    with pytest.raises(DlperfError, match=message) as err:
        serve(GPT, session=session, **options)
    assert "\n" not in str(err.value)


def test_encoder_is_refused():
    with pytest.raises(DlperfError, match="not a causal language model"):
        serve("hf:bert:layers=2,hidden=64,heads=2,mlp=128", input_len=8, output_len=2)


def test_json_keys(gpt):
    doc = json.loads(json.dumps(gpt.to_dict()))
    for key in (
        "ttft_s",
        "tpot_s",
        "latency_s",
        "output_tokens_per_s",
        "output_tokens_per_s_per_gpu",
        "memory_per_gpu_bytes",
        "kv_cache_bytes_per_token",
        "fits",
        "max_batch",
    ):
        assert key in doc
    assert set(doc["memory_per_gpu"]) >= {"weights_bytes", "kv_cache_bytes", "activations_bytes"}
    for phase in ("prefill", "decode"):
        assert doc[phase]["top_ops"] and {"op", "bound", "time_s"} <= set(doc[phase]["top_ops"][0])


def test_linear_rows_are_the_weight_gemms(gpt):
    # 4 linear layers per block, 2 blocks, and the LM head
    assert gpt.decode.extra["linear_ops"] == 4 * LAYERS + 1
    assert linear_rows([]) == []


def test_command_line_json_and_errors(capsys):
    from dlperf.cli import main

    argv = ["serve", GPT, "--input-len", "8", "--output-len", "2", "--batch", "2", "--tp", "2"]
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # exactly one document
    assert err == "" and doc["tp"] == 2 and doc["batch"] == 2
    assert main([*argv, "--precision", "fp8"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "fp8" in err


def test_command_line_input_is_the_prompts_shape(capsys):
    from dlperf.cli import main

    base = ["serve", GPT, "--output-len", "2", "--json"]
    assert main([*base, "--input", "2x8"]) == 0
    by_shape = json.loads(capsys.readouterr()[0])
    assert main([*base, "--batch", "2", "--input-len", "8"]) == 0
    by_sizes = json.loads(capsys.readouterr()[0])
    assert (by_shape["batch"], by_shape["input_len"]) == (2, 8)
    assert by_shape["latency_s"] == by_sizes["latency_s"]
    for bad in (["--input", "2x8", "--batch", "2"], ["--input", "2x8x4"]):
        assert main([*base, *bad]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1


def test_users_decoder_file(session):
    # tests/tiny_decoder.py: 2 layers, 4 heads of 16: 2 x 2 x 4 x 16 x 2 B = 512 per token
    path = str(Path(__file__).with_name("tiny_decoder.py")) + ":model"
    report = serve(path, gpu="a100", input_len=8, output_len=3, batch=2, session=session)
    assert report.kv_cache_bytes_per_token == 2 * 2 * 4 * 16 * 2
    assert report.decode.extra["linear_ops"] == 4 * 2 + 1
    with pytest.raises(DlperfError, match="takes no past_key_values"):
        serve(str(ROOT / "examples" / "tiny_cnn.py") + ":model", input_len=8, output_len=2)


def test_a_second_serve_of_one_model_on_one_session_keeps_its_kv_cache():
    # the session reuses the first serve's traces; the cache shapes the model wrote
    # while they ran must come with them (issue 20's bug: the second reported 0 bytes).
    # GPT has 2 layers x 2 (keys and values) x 128 features x 2 B = 1024 B per token
    run = resolve(GPT, gpu="a100", precision="fp16", training=False)
    session = Session()
    first = serve(run, input_len=16, output_len=4, session=session)
    second = serve(run, input_len=16, output_len=4, session=session)
    assert first.kv_cache_bytes_per_token == 2 * 2 * 128 * 2
    assert second.kv_cache_bytes_per_token == first.kv_cache_bytes_per_token
    assert second.memory["kv_cache_bytes"] == first.memory["kv_cache_bytes"] > 0


def test_serving_decodes_greedily_unless_asked_for_top_p():
    # benchmarks decode at temperature 0: one argmax over the vocabulary per step, where
    # vLLM's top-p sampler sorts it (issue 20's fix 4)
    from dlperf.serving.steps import GreedySampler, TopPSampler

    greedy = serve(GPT, gpu="a100", input_len=16, output_len=4, batch=2)
    top_p = serve(GPT, gpu="a100", input_len=16, output_len=4, batch=2, sampling="top-p")
    assert greedy.tpot_s < top_p.tpot_s
    logits = torch.randn(3, 50)
    assert torch.equal(GreedySampler()(logits), logits.argmax(dim=-1))
    assert TopPSampler()(logits).shape == (3,)
    with pytest.raises(DlperfError, match="unknown sampling"):
        serve(GPT, gpu="a100", input_len=16, output_len=4, sampling="beam")


def test_tensor_parallelism_splits_the_experts():
    # Mixtral's layer at batch 1: the 2 experts a token is routed to hold 2 x 3 x 4096 x
    # 14336 x 2 B = 704 MB of bf16 weights, read every step; each of tp GPUs reads F/tp of
    # them (issue 20's fix 1), so the step shrinks with tp where it stayed put before
    moe = "hf:mixtral:layers=1,vocab=1000"
    times = {}
    for tp in (2, 8):
        report = serve(moe, gpu="a100", precision="bf16", input_len=16, output_len=4, tp=tp)
        times[tp] = report.tpot_s
        reduces = [c for c in report.decode.extra["collectives"] if c["op"] == "nccl.all_reduce"]
        assert len(reduces) == 2  # after attention and after the experts
        # each all-reduces the layer's output, one token x 4096 x 2 B = 8,192 bytes (the
        # experts' op also outputs what it keeps for backward: 26x that, never reduced)
        assert [c["bytes"] for c in reduces] == [8192, 8192]
    # each GPU reads 704 / 2 = 352 MB at tp 2 and 704 / 8 = 88 MB at tp 8: 264 MB less,
    # about 160 us at the A100's 2.04 TB/s x 0.8; the rest of the step (attention, norms,
    # all-reduces, fixed costs) does not shrink as much
    assert times[2] - times[8] > 100e-6


def test_quantized_serving_quantizes_the_experts():
    # Mixtral 8x7B: 46.7 B parameters, 45.1 B of them in the experts' matrices. In bf16 the
    # weights need 2 B each (93 GB), over one 80 GB card; int8 (W8A8) stores the experts'
    # and the blocks' linear weights at 1 B (issue 20's fix 1): about 47 GB, it fits
    bf16 = serve("hf:mixtral", gpu="a100", precision="bf16", input_len=16, output_len=2,
                 must_fit=False)  # fmt: skip
    int8 = serve("hf:mixtral", gpu="a100", precision="int8", input_len=16, output_len=2)
    assert not bf16.fits and int8.fits
    assert int8.memory["weights_bytes"] < 0.52 * bf16.memory["weights_bytes"]
    assert int8.tpot_s < bf16.tpot_s  # the experts' weights stream at half the bytes


def test_engines_fuse_a_models_eager_attention():
    # GPT-J's class has no SDPA path: traced, its attention is bmm(q, k^T) in fp32, a scale,
    # the mask, a softmax, a cast and bmm(p, v). Engines run one fused kernel instead
    # (issue 20's fix 2). Its FLOPs at the middle decode step (batch 2, 4 heads of 32,
    # 1 new token over 16 + 1 cached + 1 = 18 keys, 2 layers): 4 x 2 x 4 x 1 x 18 x 32 x 2
    # = 36864; the model's own code (--attention eager) runs no attention kernel at all
    gptj = "hf:gptj:layers=2,hidden=128,heads=4,vocab=1000,rotary_dim=16"
    fused = serve(gptj, gpu="a100", input_len=16, output_len=4, batch=2)
    own = serve(gptj, gpu="a100", input_len=16, output_len=4, batch=2, attention="eager")
    assert fused.decode.extra["cached_tokens"][1] == 17
    assert fused.decode.extra["attention_flops"] == 4 * 2 * 4 * 1 * 18 * 32 * 2
    assert own.decode.extra["attention_flops"] == 0
    assert fused.decode.bytes < own.decode.bytes  # no fp32 copy of the cache per step


def test_engine_reserves_one_chunks_activations_and_the_rest_is_kv_cache():
    # issue 20's fix 3: an engine runs at most --max-num-batched-tokens tokens a step and
    # reserves activations for that one step, whatever the batch; tensor parallelism holds
    # 1/tp of the sharded ones (the heads, the MLP's hidden units)
    def at(batch, tp=1):
        return serve(LLAMA, gpu="a100", input_len=64, output_len=64, batch=batch, tp=tp,
                     max_num_batched_tokens=512)  # fmt: skip

    one, eight, split = at(1), at(8), at(8, tp=2)
    m = eight.memory
    assert m["activations_bytes"] == one.memory["activations_bytes"] > 0
    assert split.memory["activations_bytes"] < m["activations_bytes"]
    # the KV cache gets what 0.9 of the card leaves; a sequence holds 512 B per token
    # (test_kv_cache_bytes_per_token) in 128 slots (64 + 64 tokens: 8 blocks of 16)
    assert eight.kv_cache_bytes_per_token_per_gpu == 512
    per_sequence = 512 * 128
    assert m["kv_cache_bytes"] == 8 * per_sequence
    fixed = m["weights_bytes"] + m["activations_bytes"] + m["workspace_bytes"]
    assert m["budget_bytes"] == 0.9 * dlperf.gpu("a100").memory_bytes
    assert eight.max_batch == int((m["budget_bytes"] - fixed) // per_sequence)
    # a 4096-token chunk reserves 8 times the 512-token one's
    wide = serve(LLAMA, gpu="a100", input_len=64, output_len=64, max_num_batched_tokens=4096)
    assert wide.memory["activations_bytes"] == pytest.approx(8 * m["activations_bytes"])


def test_speculative_decoding_what_if():
    from dlperf.serving.speculative import tokens_per_step

    # 4 guesses each accepted with probability 0.7: 1 + 0.7 + 0.7^2 + 0.7^3 + 0.7^4
    # = (1 - 0.7^5) / 0.3 = 2.7731 tokens a step; all accepted: 5; none: 1
    assert tokens_per_step(4, 0.7) == pytest.approx(2.7731)
    assert tokens_per_step(4, 1.0) == 5 and tokens_per_step(4, 0.0) == 1
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": 0.7}
    report = serve(LLAMA, gpu="a100", input_len=16, output_len=4, speculative=ngram)
    sp = report.speculative
    # the n-gram proposer costs no GPU time: the step is the verification of 5 tokens a
    # sequence, which costs at least the plain one-token step
    assert sp["step_s"] == sp["verify_step_s"] >= sp["plain_tpot_s"]
    assert sp["tpot_s"] == pytest.approx(sp["step_s"] / 2.7731, rel=1e-4)
    draft = {**ngram, "method": "draft_model", "model": LLAMA}
    with_draft = serve(LLAMA, gpu="a100", input_len=16, output_len=4, speculative=draft)
    # a draft as large as the model: 4 of its decode steps are added to the verification
    sd = with_draft.speculative
    assert sd["step_s"] == pytest.approx(sd["verify_step_s"] + 4 * sd["draft_step_s"])
    assert sd["draft_step_s"] == pytest.approx(sd["plain_tpot_s"], rel=1e-9)
    assert sd["speedup"] < 1  # it cannot pay
    for bad, message in (("{", "not JSON"), ('{"method": "eagle"}', "method must be")):
        with pytest.raises(DlperfError, match=message):
            serve(LLAMA, gpu="a100", input_len=16, output_len=4, speculative=bad)


def test_the_engine_runs_the_projections_of_one_input_as_one_gemm():
    """vLLM's QKVParallelLinear and MergedColumnParallelLinear: q, k and v (and an
    MLP's gate and up) read one input and run as one GEMM; SiLU x up is one kernel."""
    from dlperf.run_config import RunConfig
    from dlperf.serving.deployment import deploy

    tiny = "hf:llama:layers=2,hidden=128,heads=4,kv_heads=2,mlp=256,vocab=1000"
    d = deploy(tiny, RunConfig.build(gpu="a100", precision="fp16"))
    step = d.tracer.step("decode", 8, 1, 16)
    layer = [r for r, b in zip(step.rows, step.block_of, strict=True) if b == 0]
    gemms = [g for r in layer for g in r.gemms]
    # hidden 128 in: q 4 heads x 32 = 128 columns, k and v 2 x 32 = 64 each: one GEMM of
    # 256; gate and up 256 each: one of 512; o (128) and down (128) as they were
    assert sorted((g.n, g.k) for g in gemms) == [(128, 128), (128, 256), (256, 128), (512, 128)]
    assert sum(r.kernels for r in layer if r.gemms) == 4
    fused = [r for r in layer if "SiluAndMul" in r.op]
    # its reads: gate and up, 8 x 256 fp16 each (8,192 bytes); its write 8 x 256 x 2 (4,096)
    assert len(fused) == 1 and fused[0].bytes == 8 * 256 * 2 * 3


def test_the_config_offers_the_samplers_the_engine_has():
    from dlperf import run_config
    from dlperf.serving import steps

    assert set(run_config.SAMPLERS) == set(steps.SAMPLERS)


def test_an_engine_runs_its_causal_kernel_whatever_mask_the_model_builds(session):
    """Falcon's Hugging Face class hands scaled_dot_product_attention a mask of its
    own; vLLM never does: --attention flash runs flash's causal kernel on the
    cache, and the prefill's attention reads q, k, v, no mask."""
    falcon = "hf:falcon:layers=1,hidden=64,heads=4,vocab=128"
    report = serve(falcon, gpu="h100", attention="flash", input_len=32, output_len=2,
                   batch=1, session=session)  # fmt: skip
    assert report.tpot_s > 0
    d = deploy(falcon, RunConfig.build(gpu="h100", attention="flash"), session)
    step = d.tracer.step("prefill", 1, 32, 0)
    (row,) = [r for r in step.rows if r.family == "attention"]
    (shape,) = row.attention_shapes
    assert shape.causal and shape.mask == ""
    # one sequence, 32 tokens, 4 heads of 16 (Falcon-7B's multi-query: one k, v head):
    # q and the output 2 x 32 x 4 x 16 x 2 B, k and v 2 x 32 x 1 x 16 x 2 B, and a 4-byte
    # log-sum-exp per query and head (512): 8,192 + 2,048 + 512 = 10,752 bytes
    assert row.bytes == pytest.approx(10_752)


def test_cpu_offload_frees_gpu_memory_and_reads_it_every_forward(session):
    """vLLM's --cpu-offload-gb: that much of each GPU's weights lives in CPU memory;
    every forward reads it over the host link."""
    llama = "hf:llama:layers=2,hidden=1024,heads=8,mlp=4096,vocab=1000"
    base = serve(llama, gpu="h100", input_len=16, output_len=4, batch=1, session=session)
    off = serve(llama, gpu="h100", input_len=16, output_len=4, batch=1, session=session,
                cpu_offload_gb=0.01)  # fmt: skip
    offloaded = 0.01 * 2**30  # 10.7 MB
    assert off.memory["weights_bytes"] == pytest.approx(base.memory["weights_bytes"] - offloaded)
    # the H100 SXM's PCIe gen5 x16, 64 GB/s: 10.7 MB in 168 us, every decode step
    assert off.tpot_s - base.tpot_s == pytest.approx(offloaded / 64e9, rel=1e-6)
