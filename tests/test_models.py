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
