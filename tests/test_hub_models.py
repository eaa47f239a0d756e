"""Every bundled checkpoint (models/hub/) builds on the meta device and its
training step traces and prices, cut to a few layers (the layers repeat);
the architectures with their own attention or experts are checked for them."""

import json

import pytest

import dlperf
from dlperf.models.hub import HUB_DIR, bundled, hub_ids

# Enough layers to reach each model's distinctive ones: DeepSeek-V3's first
# three are dense, its fourth routes; Gemma's alternate sliding and global.
LAYERS = 4


def _layers_key(doc: dict) -> str:
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if key in doc:
            return key
    raise AssertionError(f"no layer count in {doc.get('model_type')}")


@pytest.mark.parametrize("hub_id", hub_ids())
def test_each_bundled_checkpoint_traces_and_prices_a_training_step(hub_id):
    doc = bundled(hub_id)
    assert doc["_source"] == f"https://huggingface.co/{hub_id}/blob/main/config.json"
    cut = f"{_layers_key(doc)}={min(LAYERS, doc[_layers_key(doc)])}"
    if doc["model_type"] == "t5":
        cut += f",num_decoder_layers={min(LAYERS, doc.get('num_decoder_layers', LAYERS))}"
    a = dlperf.analyze(f"hf:{hub_id}:{cut}", gpu="h100", batch=1, seq_len=64)
    assert a.step_time_s > 0 and a.params > 0
    assert not a.unsupported_ops, a.unsupported_ops


def test_deepseek_v3_prices_latent_attention_and_routed_experts():
    a = dlperf.analyze(
        "hf:deepseek-ai/DeepSeek-V3:num_hidden_layers=4", gpu="h100", batch=1, seq_len=256
    )
    ops = {r.op for r in a.rows}
    assert "dlperf.moe.default" in ops  # the routed experts as one grouped-GEMM op
    attention = [r for r in a.rows if r.op == "dlperf.attention.default"]
    # multi-head latent attention: queries and keys of 128 + 64 (rope) = 192 per
    # head, values 128, 128 heads, 256 tokens
    assert len(attention) == 4
    assert all(r.shapes[:3] == [[1, 128, 256, 192]] * 2 + [[1, 128, 256, 128]] for r in attention)


def test_bundled_files_are_json_with_a_model_type():
    for path in HUB_DIR.glob("*.json"):
        doc = json.loads(path.read_text())
        assert "model_type" in doc and "_source" in doc, path.name


@pytest.mark.parametrize(
    "hub_id",
    [
        "google/gemma-2-9b:num_hidden_layers=2",  # sliding-window layers, logit softcapping
        "openai/gpt-oss-20b:num_hidden_layers=2",  # attention sinks, routed experts
        "deepseek-ai/DeepSeek-V3:num_hidden_layers=4",  # latent attention, shared + routed
    ],
)
def test_distinctive_architectures_serve(hub_id):
    r = dlperf.serve(f"hf:{hub_id}", gpu="h100", precision="bf16", batch=2)
    assert r.ttft_s > 0 and r.tpot_s > 0


def test_llama4_routes_each_token_to_its_top_expert():
    """transformers runs every Llama-4 expert on every token, scaled by its score;
    engines (and Megatron) run each token through its top-1 expert only."""
    a = dlperf.analyze("hf:meta-llama/Llama-4-Scout-17B-16E:num_hidden_layers=1", gpu="h100",
                       batch=1, seq_len=64, training=False)  # fmt: skip
    (moe,) = [r for r in a.rows if r.op == "dlperf.moe.default"]
    # 64 tokens x 1 expert x 3 matrices of 5120 x 8192, 2 FLOPs a multiply-add: 16.1 GFLOP
    # (all 16 experts would be 258 GFLOP); the shared expert runs as its own linear layers
    assert moe.gemm_flops == 2 * 64 * 3 * 5120 * 8192
    assert not a.unsupported_ops
