"""Models by name, user files, input shapes, and the analyze command."""

import json
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.models import load_model, parse_input

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_cnn.py"


def test_parse_input():
    x = parse_input("8x3x224x224")
    assert x.shape == (8, 3, 224, 224) and x.dtype == torch.float32 and x.is_meta
    assert parse_input("4x128:int64").dtype == torch.int64
    for bad in ("8x0x3", "eight", "4x4:float13"):
        with pytest.raises(DlperfError):
            parse_input(bad)


@pytest.mark.parametrize(
    "name, message",
    [
        ("torchvision:resnet5O", "did you mean: resnet50"),
        ("hf:gtp2", "did you mean: gpt2"),
        ("resnet50", "use torchvision:NAME"),
        ("missing.py:model", "does not exist"),
        (f"{EXAMPLE}:nope", "has no function 'nope'"),
    ],
)
def test_unknown_models_get_one_line_errors(name, message):
    with pytest.raises(DlperfError, match=message) as err:
        load_model(name)
    assert "\n" not in str(err.value)


def test_user_file_factory():
    loaded = load_model(f"{EXAMPLE}:model")
    a = dlperf.analyze(loaded.module, loaded.inputs, gpu="t4", precision="amp-fp16")
    assert a.unsupported_ops == {}
    assert {r.module for r in a.rows if "convolution" in r.op} == {"0", "4"}


def test_hf_models_build_from_config_without_download():
    pytest.importorskip("transformers")
    a = dlperf.analyze("hf:gpt2", gpu="h100", precision="amp-bf16", batch=2, seq_len=64)
    assert a.params == pytest.approx(124.4e6, rel=0.01)  # GPT-2 small: 124M parameters
    assert a.unsupported_ops == {}
    assert a.tokens == 2 * 64 and a.throughput["tokens_per_s"] > 0
    llama = load_model("hf:llama:layers=2,hidden=256,heads=4,mlp=512,vocab=1000", batch=1)
    n = sum(p.numel() for p in llama.module.parameters())
    # embeddings + head: 2*1000*256; per layer: 4*256^2 attention + 3*256*512 MLP + 2*256 norms
    assert n == 2 * 1000 * 256 + 2 * (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) + 256


def test_cli_analyze_json(capsys):
    code = main(
        ["analyze", f"{EXAMPLE}:model", "--gpu", "a100", "--precision", "amp-fp16", "--json"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["precision"] == "amp-fp16" and doc["training"] is True
    assert set(doc["phases"]) == {"forward", "backward", "optimizer"}
    assert {o["phase"] for o in doc["ops"]} == {"forward", "backward", "optimizer"}


def test_cli_analyze_terminal_and_input_override(capsys):
    code = main(
        [
            "analyze",
            f"{EXAMPLE}:model",
            "--gpu",
            "v100",
            "--infer",
            "--input",
            "2x3x32x32",
            "--top",
            "3",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "inference step" in out and "batch 2" in out
    assert "by category" in out


def test_cli_analyze_bad_model(capsys):
    assert main(["analyze", "torchvision:resnet5O"]) == 2
    err = capsys.readouterr().err
    assert "did you mean: resnet50" in err and len(err.strip().splitlines()) == 1


def _torchvision_classifiers():
    try:
        import torchvision
    except ImportError:
        return []
    return torchvision.models.list_models(module=torchvision.models)


@pytest.mark.slow
@pytest.mark.parametrize("name", _torchvision_classifiers())
def test_every_torchvision_classifier_traces(name):
    a = dlperf.analyze(f"torchvision:{name}", batch=2, gpu="a100", precision="amp-fp16")
    assert {r.phase for r in a.rows} == {"forward", "backward", "optimizer"}
    assert a.unsupported_ops == {}
    assert a.time_s > 0


# -- Hugging Face options: any config key, the task head, the position limit ----


def test_hf_spec_sets_any_config_key_typed_by_its_current_value():
    pytest.importorskip("transformers")
    spec = "hf:gpt2:layers=1,layer_norm_epsilon=1e-3,scale_attn_weights=false,n_inner=96"
    config = load_model(spec + ",activation_function=relu", batch=1, seq_len=8).module.config
    assert config.n_layer == 1  # the short key is still an alias
    assert config.layer_norm_epsilon == 1e-3 and isinstance(config.layer_norm_epsilon, float)
    assert config.scale_attn_weights is False
    assert config.n_inner == 96  # None by default: the text is read as an integer
    assert config.activation_function == "relu"


def test_hf_mpt_runs_past_2048_tokens():
    pytest.importorskip("transformers")
    small = "layers=1,hidden=64,heads=2,vocab=100"
    for key in ("max_seq_len", "positions"):  # positions is mpt's max_seq_len
        loaded = load_model(f"hf:mpt:{small},{key}=8192", batch=1, seq_len=4096)
        assert loaded.module.config.max_seq_len == 8192
        assert loaded.inputs["input_ids"].shape == (1, 4096)
    a = dlperf.analyze(loaded.module, loaded.inputs, gpu="h100", training=False)
    assert a.unsupported_ops == {}


def test_hf_unknown_key_names_the_valid_keys_close_ones_first():
    pytest.importorskip("transformers")
    with pytest.raises(DlperfError) as err:
        load_model("hf:mpt:max_seq=8192")
    text = str(err.value)
    assert "\n" not in text
    assert text.index("did you mean: max_seq_len") < text.index("valid keys: layers, hidden")
    assert "expansion_ratio" in text  # mpt's own keys are listed too
    for bad, message in [
        ("hf:gpt2:layer_norm_epsilon=small", "is a number, not 'small'"),
        ("hf:gpt2:scale_attn_weights=maybe", "is true or false"),
        ("hf:gpt2:kv_heads=4", "gpt2 configs have no key 'kv_heads'"),
        ("hf:gpt2:layers=0", "not a positive integer"),
        ("hf:gpt2:layers", "use key=value"),
    ]:
        with pytest.raises(DlperfError, match=message):
            load_model(bad)


@pytest.mark.parametrize(
    "head, model_class, label_shape",
    [
        ("sequence-classification", "BertForSequenceClassification", (2,)),  # one per sequence
        ("token-classification", "BertForTokenClassification", (2, 16)),  # one per token
        ("masked-lm", "BertForMaskedLM", (2, 16)),
        ("base", "BertModel", None),
    ],
)
def test_hf_head_chooses_the_task_head_and_its_inputs(head, model_class, label_shape):
    pytest.importorskip("transformers")
    loaded = load_model(f"hf:bert-large-uncased:head={head}", batch=2, seq_len=16)
    assert type(loaded.module).__name__ == model_class
    labels = loaded.inputs.get("labels")
    assert (labels.shape if labels is not None else None) == label_shape
    small = load_model(f"hf:bert-large-uncased:layers=1,head={head}", batch=2, seq_len=16)
    a = dlperf.analyze(small.module, small.inputs, gpu="a100", precision="amp-bf16")
    assert {r.phase for r in a.rows} == {"forward", "backward", "optimizer"}


def test_hf_question_answering_and_bad_heads():
    pytest.importorskip("transformers")
    qa = load_model("hf:gpt2:layers=1,head=question-answering", batch=3, seq_len=8)
    assert qa.inputs["start_positions"].shape == qa.inputs["end_positions"].shape == (3,)
    with pytest.raises(DlperfError, match="no head 'masked-lm' for gpt2; choose from: causal-lm"):
        load_model("hf:gpt2:head=masked-lm")
    with pytest.raises(DlperfError, match=r"for attention heads: heads=12"):
        load_model("hf:gpt2:head=12")


def test_hf_seq_len_beyond_the_position_table_is_refused():
    pytest.importorskip("transformers")
    with pytest.raises(DlperfError, match=r"1024 positions of hf:gpt2; .* hf:gpt2:positions=4096"):
        load_model("hf:gpt2", batch=1, seq_len=4096)
    with pytest.raises(DlperfError, match="hf:gpt2:layers=1,positions=2048"):
        load_model("hf:gpt2:layers=1", batch=1, seq_len=2048)
    longer = load_model("hf:gpt2:layers=1,positions=4096", batch=1, seq_len=4096)
    assert longer.max_positions == 4096 and longer.inputs["input_ids"].shape == (1, 4096)
    assert load_model("hf:bert-base-uncased", seq_len=16).max_positions == 512
    # rotary positions have no table: llama takes any length
    llama = load_model("hf:llama:layers=1,hidden=64,heads=2,mlp=128,vocab=100", seq_len=65536)
    assert llama.max_positions is None and llama.inputs["input_ids"].shape[1] == 65536


def test_falcon_builds_with_its_own_head_size():
    # FalconConfig derives head_dim (hidden / heads) as a read-only property: dlperf must
    # not set it (issue 20's bug); 64 / 4 = 16
    model = load_model("hf:falcon:layers=1,hidden=64,heads=4,vocab=128").module
    assert model.config.head_dim == 16


def test_latent_attention_keeps_its_rotary_width_when_resized():
    """DeepSeek-V3's head_dim is its rotary part (qk_rope_head_dim 64), not hidden /
    heads: 7168 / 128 = 56 gave a 28-frequency rotary table that failed to broadcast
    on 32 (19 of NVIDIA's DeepSeek-V3 rows failed to trace)."""
    spec = "hf:deepseek_v3:layers=1,hidden=7168,heads=128,kv_heads=128,vocab=1000,experts=4"
    model = load_model(spec, batch=1, seq_len=8).module
    assert model.config.head_dim == model.config.qk_rope_head_dim == 64
    attention = model.model.layers[0].self_attn
    # queries: 128 heads of 128 (no rotary) + 64 (rotary) = 192 each
    assert attention.q_b_proj.out_features == 128 * (128 + 64)
    result = dlperf.analyze(spec, gpu="h100", batch=1, seq_len=64)
    assert result.params == sum(p.numel() for p in model.parameters())


def test_a_new_layer_count_resizes_the_per_layer_lists():
    """Qwen3's default config holds 28 `layer_types`; 40 layers used to fail with an
    IndexError in its 29th layer. Gemma 3's pattern (5 sliding, 1 full) repeats."""
    qwen = load_model("hf:qwen3:layers=40,hidden=64,heads=4,kv_heads=2,mlp=128,vocab=100",
                      batch=1, seq_len=8).module.config  # fmt: skip
    assert len(qwen.layer_types) == 40
    gemma = load_model("hf:gemma3_text:layers=8,hidden=64,heads=4,kv_heads=1,mlp=128,vocab=100",
                       batch=1, seq_len=8).module.config  # fmt: skip
    assert gemma.layer_types == ["sliding_attention"] * 5 + ["full_attention"] + [
        "sliding_attention"
    ] * 2


@pytest.mark.parametrize(
    "spec, message",
    [
        # issue 36, item 5: a tensor-broadcast error from llama's rotary code before
        ("hf:llama:layers=1,hidden=4096,heads=7", "hidden 4096 is not divisible by heads=7"),
        ("hf:llama:layers=1,hidden=256,heads=8,kv_heads=3", "heads 8 is not divisible by kv_heads"),
    ],
)
def test_hf_heads_that_do_not_divide_are_refused(spec, message):
    pytest.importorskip("transformers")
    with pytest.raises(DlperfError, match=message):
        load_model(spec, batch=1, seq_len=8)


def test_a_config_validation_error_is_shown_whole(tmp_path):
    """transformers' validators announce the reason on the next line; the
    refusal used to stop at "validator 'validate_architecture':"."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    fields = {"model_type": "llama", "hidden_size": 500, "num_attention_heads": 8,
              "num_hidden_layers": 1, "vocab_size": 128, "intermediate_size": 64}  # fmt: skip
    config.write_text(json.dumps(fields))
    with pytest.raises(DlperfError) as err:
        load_model(f"hf:{config}", batch=1, seq_len=8)
    assert "\n" not in str(err.value) and not str(err.value).endswith(":")
    assert "500" in str(err.value)


def test_head_dim_where_the_config_class_does_not_declare_it():
    """Qwen3-MoE's attention reads `head_dim` though its config class does not
    declare it (Qwen3-30B-A3B: 32 heads of 128 on a 2048-wide model); GPT-2's
    never reads it: refused, not silently ignored."""
    model = load_model("hf:qwen3_moe:layers=1,hidden=2048,heads=32,kv_heads=4,head_dim=128,"
                       "vocab=1000").module  # fmt: skip
    assert model.model.layers[0].self_attn.q_proj.out_features == 32 * 128
    with pytest.raises(DlperfError, match="does not read head_dim"):
        load_model("hf:gpt2:layers=1,head_dim=32")
