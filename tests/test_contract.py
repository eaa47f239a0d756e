"""The command line's contract for every verb that takes a model: it runs with
--input and without, on a vision model, a token model and a user's file, and
--json prints exactly one JSON document on stdout and nothing on stderr."""

import json
from pathlib import Path

import pytest

from dlperf.cli import main
from tests.test_measure import cached_cpu  # noqa: F401  (a probed CPU already in the cache)

ROOT = Path(__file__).resolve().parents[1]
TINY_GPT = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=128,positions=64"
TINY_CNN = str(ROOT / "examples" / "tiny_cnn.py") + ":model"

# name -> (MODEL, --input arguments and the batch they give,
#          default-input arguments and the batch they give)
MODELS = {
    "vision": ("torchvision:squeezenet1_1", (["--input", "2x3x32x32"], 2), (["--batch", "3"], 3)),
    "token": (TINY_GPT, (["--input", "2x16"], 2), (["--batch", "3", "--seq-len", "8"], 3)),
    # --batch resizes the inputs the factory returns
    "file": (TINY_CNN, (["--input", "2x3x32x32"], 2), (["--batch", "4"], 4)),
}
# Where each verb's JSON states the batch it traced (plan: its micro-batch).
BATCH_FIELD = {"analyze": "batch", "memory": "batch", "plan": "micro_batch"}


def run_json(capsys, argv):
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    return json.loads(out)  # raises on anything but exactly one document


def cases(verbs):
    for verb in verbs:
        for kind, (model, with_input, defaults) in MODELS.items():
            for label, (extra, batch) in (("input", with_input), ("defaults", defaults)):
                yield pytest.param(verb, model, extra, batch, id=f"{verb}-{kind}-{label}")


@pytest.mark.parametrize(
    "verb, model, extra, batch", cases(["analyze", "memory", "plan", "advise"])
)
def test_verb_takes_model_with_and_without_input(capsys, verb, model, extra, batch):
    doc = run_json(capsys, [verb, model, *extra])
    assert doc["model"] == model  # the name as given: nothing repairs it afterwards
    if verb in BATCH_FIELD:
        assert doc[BATCH_FIELD[verb]] == batch


@pytest.mark.parametrize("verb, model, extra, batch", cases(["report"]))
def test_report_takes_model_with_and_without_input(capsys, tmp_path, verb, model, extra, batch):
    out = tmp_path / "r.html"
    doc = run_json(capsys, [verb, model, *extra, "--out", str(out)])
    assert doc == {"out": str(out)}
    assert "<html" in out.read_text().lower()


def test_model_file_inputs_by_default(capsys):
    """examples/tiny_cnn.py's factory returns inputs of batch 32: those are traced."""
    assert run_json(capsys, ["analyze", TINY_CNN])["batch"] == 32


def test_token_input_feeds_every_id_input(capsys):
    """A seq2seq model takes its one --input as encoder and decoder ids alike."""
    doc = run_json(capsys, ["analyze", "hf:t5-small", "--input", "2x8", "--infer"])
    assert doc["batch"] == 2


def test_default_precision_follows_the_gpu(capsys):
    """auto: amp-fp16 on a V100 (no bf16 math), amp-bf16 on an A100."""
    base = ["analyze", TINY_CNN, "--input", "2x3x32x32"]
    v100 = run_json(capsys, [*base, "--gpu", "v100"])
    assert v100["precision"] == "amp-fp16"
    assert v100["mfu"] > 0  # its convolutions run on fp16 Tensor Cores, not on nothing
    assert run_json(capsys, [*base, "--gpu", "a100"])["precision"] == "amp-bf16"


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, extra",
    [
        pytest.param(model, extra, id=f"{kind}-{label}")
        for kind, model, label, extra in [
            ("vision", "torchvision:squeezenet1_1", "input", ["--input", "1x3x32x32"]),
            ("vision", "torchvision:squeezenet1_1", "defaults", ["--batch", "1"]),
            ("token", TINY_GPT, "input", ["--input", "1x8"]),
            ("token", TINY_GPT, "defaults", ["--batch", "1", "--seq-len", "8"]),
            ("file", TINY_CNN, "input", ["--input", "1x3x16x16"]),
            ("file", TINY_CNN, "defaults", ["--batch", "1"]),
        ]
    ],
)
def test_measure_takes_model_with_and_without_input(capsys, cached_cpu, model, extra):  # noqa: F811
    """Measuring runs the model for real on this CPU (tiny inputs, one step)."""
    doc = run_json(capsys, ["measure", model, *extra, "--steps", "1"])
    assert doc["model"] == model
