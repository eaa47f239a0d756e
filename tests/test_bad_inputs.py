"""Bad input across every verb: exit status 2, exactly one line on stderr, no
traceback, nothing on stdout. Hypothesis adds malformed shapes and spec files."""

import json
from pathlib import Path

import pytest
import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlperf.cli import main
from dlperf.dtypes import DTYPES
from dlperf.hardware.spec import _REQUIRED
from dlperf.models import _DTYPES as INPUT_DTYPES

ROOT = Path(__file__).resolve().parents[1]
CNN = str(ROOT / "examples" / "tiny_cnn.py")
GPT = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=128,positions=64"
T4_SPEC = tomllib.loads((ROOT / "src/dlperf/hardware/specs/t4.toml").read_text())


def run(capsys, argv):
    """(exit status, stdout, stderr) of one command line, usage errors included."""
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse exits on its own usage errors
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err):
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("dlperf: error: ")
    assert "Traceback" not in err


def write_files(folder: Path) -> None:
    """The bad files the cases below name, under `folder`."""
    texts = {
        "syntax_error.py": "def model(:\n",
        "import_error.py": "import dlperf_no_such_module\n",
        "raises.py": "def model():\n    raise ValueError('width must be even')\n",
        "needs_args.py": "def model(width):\n    return width\n",
        "not_module.py": "def model():\n    return 42\n",
        "no_params.py": "from torch import nn\ndef model():\n    return nn.ReLU()\n",
        "bad.toml": "id = \n",
        "prose.txt": "a V100, I think, with 32 GB\n",
        "missing_field.json": json.dumps({k: v for k, v in T4_SPEC.items() if k != "sm_count"}),
        "wrong_type.json": json.dumps({**T4_SPEC, "sm_count": "forty"}),
        "not_json.json": "{",
        "no_events.json": json.dumps({"hello": 1}),
        "string_ts.json": json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}
        ),
        "no_dur.json": json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0}]}
        ),
        "bad_interconnect.json": json.dumps({"bandwidth_bytes_per_s": -1}),
        "afile": "not a folder\n",
        "megatron_unclosed.sh": "python pretrain_gpt.py --num-layers 2 --hidden-size 64 \\\n"
        "  --num-attention-heads 2 --seq-length 64 --data-path 'my data\n",
        "timed.jsonl": '{"input_len": 8, "output_len": 2, "arrival_s": 0}\n' * 3,
        "partly_timed.jsonl": '{"input_len": 8, "output_len": 2, "arrival_s": 0}\n'
        '{"input_len": 8, "output_len": 2}\n',
        "vllm_unclosed.sh": 'vllm serve gpt2 --max-num-seqs 8 --served-model-name "gpt\n',
        # issue 36, item 7
        "vllm_negative_seqs.sh": "vllm serve gpt2 --max-num-seqs -5\n",
        "vllm_zero_tp.sh": "vllm serve gpt2 --tensor-parallel-size 0\n",
        "vllm_memory_share.sh": "vllm serve gpt2 --gpu-memory-utilization 1.5\n",
        "vllm_no_value.sh": "vllm serve gpt2 --max-num-seqs\n",
        "vllm_serve.sh": "vllm serve gpt2 --tensor-parallel-size 2\n",
        "hf_fp16_bf16.json": json.dumps(
            {"per_device_train_batch_size": 2, "fp16": True, "bf16": True}
        ),
        "titan_mx.toml": '[model]\nname = "llama3"\nflavor = "debugmodel"\nconverters = ["mx"]\n'
        "[training]\nlocal_batch_size = 1\nseq_len = 64\n",
        "megatron_bad_nproc.sh": "torchrun --nproc_per_node 0 pretrain_gpt.py --num-layers 2 "
        "--hidden-size 64 --num-attention-heads 2 --seq-length 64\n",
    }
    for name, text in texts.items():
        (folder / name).write_text(text)


CASES = {
    # names and typos
    "torchvision-typo": ["analyze", "torchvision:resnet5"],
    "hf-typo": ["analyze", "hf:gtp2"],
    "no-model-kind": ["analyze", "resnet50"],
    "empty-model-name": ["analyze", "torchvision:"],
    "hf-bad-size": ["memory", "hf:gpt2:layers=x"],
    "hf-heads-not-dividing": ["memory", "hf:llama:layers=1,hidden=4096,heads=7"],
    "hf-kv-heads-not-dividing": ["memory", "hf:llama:layers=1,hidden=256,heads=8,kv_heads=3"],
    "gpu-typo": ["analyze", f"{CNN}:model", "--gpu", "h1000"],
    "gemm-gpu-typo": ["gemm", "1", "2", "3", "--gpu", "a10O"],
    "precision-choice": ["analyze", f"{CNN}:model", "--precision", "fp8"],
    "optimizer-choice": ["analyze", f"{CNN}:model", "--optimizer", "adamm"],
    "gemm-dtype-choice": ["gemm", "1", "2", "3", "--dtype", "fp13"],
    "checkpoint-policy": ["memory", f"{CNN}:model", "--checkpoint", "sometimes"],
    "unknown-rule": ["advise", f"{CNN}:model", "--rules", "nope"],
    "apply-manual-rule": ["advise", f"{CNN}:model", "--apply", "fused-attention"],
    "apply-unknown-rule": ["advise", f"{CNN}:model", "--apply", "nope"],
    "advise-no-model": ["advise"],
    "unknown-sweep": ["sweep", "nope"],
    "unknown-verb": ["analyse", "hf:gpt2"],
    "torch-version-unknown": ["analyze", f"{CNN}:model", "--torch-version", "3.0"],
    # a precision the GPU lacks
    "bf16-on-v100": ["analyze", f"{CNN}:model", "--gpu", "v100", "--precision", "amp-bf16"],
    "tf32-on-v100": ["analyze", f"{CNN}:model", "--gpu", "v100", "--precision", "tf32"],
    "gemm-bf16-on-v100": ["gemm", "64", "64", "64", "--gpu", "v100", "--dtype", "bf16"],
    "bf16-memory-on-t4": ["memory", f"{CNN}:model", "--gpu", "t4", "--precision", "bf16"],
    # sizes
    "gemm-zero": ["gemm", "0", "2", "3"],
    "gemm-overflow": ["gemm", "99999999999", "99999999999", "99999999999"],
    # issue 36, item 9: only an oversized A was refused (C here: 2**48 values, 512 TiB)
    "gemm-output-past-memory": ["gemm", "16777216", "16777216", "1"],
    "gemm-operands-past-memory": ["gemm", "1", "2", "99999999999"],
    "serve-quant-group-past-rows": [
        "serve", "hf:gpt2:layers=2,hidden=96,heads=2,vocab=128,positions=512",
        "--precision", "int4-weight", "--quant-group", "128",
    ],  # fmt: skip
    "gemm-not-a-number": ["gemm", "1", "2", "x"],
    "gemm-batch-zero": ["gemm", "1", "1", "1", "--batch", "0"],
    "batch-zero": ["analyze", f"{CNN}:model", "--batch", "0"],
    "batch-negative": ["analyze", f"{CNN}:model", "--batch", "-3"],
    "seq-len-word": ["analyze", GPT, "--seq-len", "abc"],
    "accumulate-uneven": ["memory", f"{CNN}:model", "--input", "2x3x32x32", "--accumulate", "3"],
    "top-zero": ["analyze", f"{CNN}:model", "--top", "0"],
    # shapes
    "shape-empty-size": ["analyze", f"{CNN}:model", "--input", "2x3xx4"],
    "shape-zero": ["analyze", f"{CNN}:model", "--input", "0x3x32x32"],
    "shape-dtype": ["analyze", f"{CNN}:model", "--input", "2x3:float99"],
    "shape-blank": ["analyze", f"{CNN}:model", "--input", ""],
    "token-shape-float": ["analyze", GPT, "--input", "2x16:float32"],
    "token-two-shapes": ["analyze", GPT, "--input", "2x16", "--input", "2x16"],
    "shape-and-batch": ["analyze", f"{CNN}:model", "--input", "2x3x32x32", "--batch", "4"],
    "shape-channels": ["analyze", f"{CNN}:model", "--input", "2x5x32x32"],
    # spec files
    "spec-missing": ["gemm", "8", "8", "8", "--gpu", "{tmp}/missing.toml"],
    "spec-syntax": ["gemm", "8", "8", "8", "--gpu", "{tmp}/bad.toml"],
    "spec-prose": ["gemm", "8", "8", "8", "--gpu", "{tmp}/prose.txt"],
    "spec-missing-field": ["gemm", "8", "8", "8", "--gpu", "{tmp}/missing_field.json"],
    "spec-wrong-type": ["analyze", f"{CNN}:model", "--gpu", "{tmp}/wrong_type.json"],
    # profiler traces
    "trace-missing": ["trace", "{tmp}/missing.json"],
    "trace-not-json": ["trace", "{tmp}/not_json.json"],
    "trace-no-events": ["trace", "{tmp}/no_events.json"],
    "trace-string-ts": ["trace", "{tmp}/string_ts.json", "--gpu", "a100"],
    "trace-no-dur": ["trace", "{tmp}/no_dur.json", "--gpu", "a100"],
    # model files
    "file-missing": ["analyze", "{tmp}/missing.py:model"],
    "file-syntax": ["analyze", "{tmp}/syntax_error.py:model"],
    "file-import": ["analyze", "{tmp}/import_error.py:model"],
    "file-factory-typo": ["analyze", f"{CNN}:modle"],
    "file-factory-raises": ["analyze", "{tmp}/raises.py:model"],
    "file-factory-arguments": ["analyze", "{tmp}/needs_args.py:model"],
    "file-not-a-module": ["plan", "{tmp}/not_module.py:model"],
    "train-without-parameters": ["analyze", "{tmp}/no_params.py:model", "--input", "2x8"],
    # plan options
    "network-negative": ["plan", f"{CNN}:model", "--node-network-gbps", "-100"],
    "network-zero": ["plan", f"{CNN}:model", "--node-network-gbps", "0"],
    "network-nan": ["plan", f"{CNN}:model", "--node-network-gbps", "nan"],
    "gpus-zero": ["plan", f"{CNN}:model", "--gpus", "0"],
    "interconnect-missing": ["plan", f"{CNN}:model", "--interconnect", "{tmp}/missing.json"],
    "interconnect-bad": ["plan", f"{CNN}:model", "--interconnect", "{tmp}/bad_interconnect.json"],
    # issue 36, item 11
    "plan-gpus-twice": ["plan", f"{CNN}:model", "--gpus", "8,8", "--steps", "10"],
    "plan-steps-and-tokens": ["plan", GPT, "--steps", "10", "--tokens", "1000"],
    "analyze-steps-and-tokens": ["analyze", f"{CNN}:model", "--steps", "10", "--tokens", "1000"],
    "global-batch-uneven": ["plan", f"{CNN}:model", "--global-batch", "3"],
    "comm-sizes": ["measure-comm", "--sizes", "many"],
    # config files
    "config-megatron-unclosed-quote": ["explain-config", "{tmp}/megatron_unclosed.sh"],
    "config-vllm-unclosed-quote": ["serve", GPT, "--config", "{tmp}/vllm_unclosed.sh"],
    "config-vllm-negative-seqs": ["explain-config", "{tmp}/vllm_negative_seqs.sh"],
    "config-vllm-zero-tp": ["explain-config", "{tmp}/vllm_zero_tp.sh"],
    "config-vllm-memory-share": ["explain-config", "{tmp}/vllm_memory_share.sh"],
    "config-vllm-no-value": ["explain-config", "{tmp}/vllm_no_value.sh"],
    "config-vllm-plan": ["plan", GPT, "--config", "{tmp}/vllm_serve.sh"],
    "config-hf-fp16-and-bf16": ["analyze", GPT, "--config", "{tmp}/hf_fp16_bf16.json"],
    "config-torchtitan-mx": ["explain-config", "{tmp}/titan_mx.toml"],
    "config-torchrun-nproc-0": ["explain-config", "{tmp}/megatron_bad_nproc.sh"],
    # output paths
    "report-missing-folder": ["report", f"{CNN}:model", "--out", "{tmp}/nowhere/r.html"],
    "report-into-folder": ["report", f"{CNN}:model", "--out", "{tmp}"],
    "report-under-file": ["report", f"{CNN}:model", "--out", "{tmp}/afile/r.html"],
    "comm-missing-folder": ["measure-comm", "--out", "{tmp}/nowhere/ic.json"],
    "comm-into-folder": ["measure-comm", "--out", "{tmp}"],
    "sweep-onto-file": ["sweep", "gemm-tiles", "--out", "{tmp}/afile"],
    "calibrate-missing-folder": ["calibrate", "--out", "{tmp}/nowhere/cpu.toml"],
    "calibrate-into-folder": ["calibrate", "--out", "{tmp}"],
    # options that would change nothing (issue 21, item 4): refused, never dropped
    "memory-infer": ["memory", f"{CNN}:model", "--infer"],
    "plan-infer": ["plan", f"{CNN}:model", "--infer"],
    "plan-nodes-and-gpus": ["plan", f"{CNN}:model", "--nodes", "2", "--gpus", "64"],
    "plan-partial-node": ["plan", f"{CNN}:model", "--gpus", "8", "--gpus-per-node", "3"],
    "plan-two-micro-batches": ["plan", f"{CNN}:model", "--micro-batch", "2", "--batch", "4"],
    "seq-len-on-images": ["analyze", f"{CNN}:model", "--seq-len", "128"],
    "checkpoint-inference": ["analyze", f"{CNN}:model", "--infer", "--checkpoint", "full"],
    "cuda-graphs-on-cpu": ["analyze", f"{CNN}:model", "--gpu", "cpu", "--cuda-graphs"],
    "checkpoint-every-past-blocks": ["memory", GPT, "--checkpoint", "every:100"],
    "serve-past-rotary-window": [
        "serve",
        "hf:llama:layers=2,hidden=64,heads=4,positions=64",
        "--input-len",
        "100",
    ],  # fmt: skip
    "serve-tp-uneven-heads": ["serve", GPT, "--tp", "3"],
    # serving, and its simulated benchmarks
    "serve-bf16-on-t4": ["serve", GPT, "--gpu", "t4", "--precision", "bf16"],
    "serve-memory-share": ["serve", GPT, "--gpu-memory-utilization", "1.5"],
    "serve-offload-negative": ["serve", GPT, "--cpu-offload-gb", "-1"],
    "tokens-of-an-image-model": ["analyze", CNN, "--train", "--tokens", "1000"],
    "serve-prompts-past-bound": ["serve", GPT, "--request-rate", "5", "--num-prompts",
                                 "1000000000", "--dataset", "random:in=128,out=32"],
    "serve-offload-past-weights": ["serve", GPT, "--cpu-offload-gb", "100"],
    "serve-rate-zero": ["serve", GPT, "--request-rate", "0"],
    "serve-dataset-typo": ["serve", GPT, "--dataset", "random:in=10,ot=5"],
    "serve-dataset-sharegpt": ["serve", GPT, "--dataset", "sharegpt"],
    "serve-dataset-missing": ["serve", GPT, "--dataset", "{tmp}/missing.jsonl"],
    "serve-slo-unit": ["serve", GPT, "--request-rate", "1", "--slo", "ttft=5min"],
    "serve-max-rate-no-slo": ["serve", GPT, "--find-max-rate"],
    "serve-stages-malformed": ["serve", GPT, "--stages", "8x"],
    "serve-stages-with-rate": ["serve", GPT, "--stages", "8x1", "--request-rate", "3"],
    "serve-shared-prefix-partial": ["serve", GPT, "--dataset", "shared-prefix:system=10"],
    "serve-seed-negative": ["serve", GPT, "--request-rate", "1", "--seed", "-1"],
    "serve-max-model-len-past-positions": ["serve", GPT, "--max-model-len", "128"],
    "serve-request-past-max-model-len": [
        "serve", GPT, "--request-rate", "1", "--dataset", "random:in=40,out=10",
        "--max-model-len", "32",
    ],  # fmt: skip
    # issue 36, items 6 and 8: a file of timestamps sets the arrivals
    "serve-timed-with-rate": [
        "serve", GPT, "--dataset", "{tmp}/timed.jsonl", "--request-rate", "9",
    ],  # fmt: skip
    "serve-timed-stages": ["serve", GPT, "--dataset", "{tmp}/timed.jsonl", "--stages", "1x3"],
    "serve-timed-max-rate": [
        "serve", GPT, "--dataset", "{tmp}/timed.jsonl", "--find-max-rate", "--slo", "ttft=1s",
    ],  # fmt: skip
    "serve-timed-past-its-lines": [
        "serve", GPT, "--dataset", "{tmp}/timed.jsonl", "--num-prompts", "4",
    ],  # fmt: skip
    "serve-partly-timed": ["serve", GPT, "--dataset", "{tmp}/partly_timed.jsonl"],
    # issue 36, item 8: vLLM refuses these engines
    "serve-step-tokens-below-seqs": [
        "serve", GPT, "--input-len", "8", "--output-len", "4", "--max-num-batched-tokens", "1",
    ],  # fmt: skip
    "serve-block-size-7": [
        "serve", GPT, "--input-len", "8", "--output-len", "4", "--block-size", "7",
    ],  # fmt: skip
    "serve-slo-key-twice": [
        "serve", GPT, "--dataset", "random:in=8,out=4", "--slo", "ttft=1s,ttft=2s",
    ],  # fmt: skip
    "serve-batch-in-simulation": ["serve", GPT, "--request-rate", "1", "--batch", "4"],
    "serve-engine-flag-static": ["serve", GPT, "--max-num-seqs", "8"],
    "serve-speculative-json": ["serve", GPT, "--speculative-config", "{k: 4}"],
    "serve-request-too-long": ["serve", GPT, "--dataset", "random:in=60,out=10"],
}


def test_hints_name_what_the_verb_takes(capsys):
    # issue 21, item 6: serve suggested --precision amp-fp16 (or auto), which serve refuses
    code, _, err = run(capsys, ["serve", GPT, "--gpu", "t4", "--precision", "bf16"])
    assert code == 2 and "use --precision fp16" in err and "amp" not in err


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--request-rate", "9"], "drop --request-rate"),
        (["--find-max-rate", "--slo", "ttft=1s"], "drop --find-max-rate"),
        (["--num-prompts", "4"], "more requests than the 3 with arrival_s"),
    ],
)
def test_a_file_of_timestamps_names_the_flag_that_clashes(capsys, tmp_path, flags, says):
    # issue 36, items 6 and 8: each was "give arrival_s on every line" (the default
    # --num-prompts 1000), or the rate was printed and the file's arrivals used
    write_files(tmp_path)
    code, _, err = run(capsys, ["serve", GPT, "--dataset", f"{tmp_path}/timed.jsonl", *flags])
    assert code == 2 and says in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["gemm", "8", "8", "8", "--gpu", "{tmp}"], "is a folder: give a .toml or .json spec"),
        (["gemm", "8", "8", "8", "--gpu", "{tmp}/no.toml"], "or a GPU of the catalogue"),
        (["trace", "{tmp}"], "is a folder: give one profiler trace file"),
        (["trace", "{tmp}/no.json"], "give the path of a PyTorch profiler trace"),
    ],
)
def test_a_missing_or_folder_path_says_what_was_expected(capsys, tmp_path, argv, says):
    # issue 36, item 6: each said only "does not exist"
    code, _, err = run(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and says in err and err.count("\n") == 1


def test_a_model_with_nothing_to_train_is_told_so(capsys, tmp_path):
    # issue 21, item 6: it was blamed on "tracing failed in (loss)"
    write_files(tmp_path)
    code, _, err = run(capsys, ["analyze", f"{tmp_path}/no_params.py:model", "--input", "2x8"])
    assert code == 2 and "no trainable parameters" in err and "--infer" in err


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv):
    write_files(tmp_path)
    assert_one_line_error(*run(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv]))


def test_calibrate_checks_out_before_probing(capsys, tmp_path, monkeypatch):
    import dlperf.measurement.calibrate as calibrate

    def probe(*args, **kwargs):
        raise AssertionError("probed the device before checking --out")

    monkeypatch.setattr(calibrate, "calibrate_device", probe)
    argv = ["calibrate", "--out", str(tmp_path / "nowhere" / "cpu.toml")]
    assert_one_line_error(*run(capsys, argv))


def test_out_check_leaves_no_file_behind(capsys, tmp_path):
    """Proving --out writable creates nothing when the verb then fails."""
    out = tmp_path / "r.html"
    argv = ["report", f"{CNN}:model", "--gpu", "nope", "--out", str(out)]
    assert_one_line_error(*run(capsys, argv))
    assert not out.exists()


def test_shape_too_large_is_refused(capsys):
    argv = ["analyze", f"{CNN}:model", "--input", "99999999999x99999999999x99999999999"]
    assert_one_line_error(*run(capsys, argv))


# -- generated --------------------------------------------------------------------

# A fixed seed and no example database: the same cases on every run and machine,
# no .hypothesis folder in the checkout.
GENERATED = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

sizes = st.integers(1, 64).map(str)
# Each corruption breaks the grammar SIZE(xSIZE)*[:DTYPE] with SIZE a positive integer.
bad_sizes = st.one_of(
    st.just(""),
    st.just("0"),
    st.integers(1, 99).map(lambda n: f"-{n}"),
    st.text("abcdefghijklmnopqrstuvwyz.,;!?*", min_size=1, max_size=4),
    st.floats(0.1, 9.9).map(lambda f: f"{f:.1f}"),
)
bad_dtypes = st.text("abcdefghijklmnopqrstuvwyz0123456789", min_size=1, max_size=8).filter(
    lambda d: d not in INPUT_DTYPES
)


@st.composite
def malformed_shapes(draw):
    dims = draw(st.lists(sizes, min_size=1, max_size=4))
    if draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = draw(bad_sizes)
        dtype = draw(st.sampled_from(["", ":int64", ":fp16"]))
    else:
        dtype = ":" + draw(bad_dtypes)
    return "x".join(dims) + dtype


@GENERATED
@given(shape=malformed_shapes())
def test_malformed_shapes(capsys, shape):
    assert_one_line_error(*run(capsys, ["analyze", f"{CNN}:model", "--input", shape]))


def _wrong_values(kind):
    """Values a spec field of this kind must refuse (per the loader's contract)."""
    common = [st.booleans(), st.lists(st.integers(), max_size=2), st.just({"a": 1})]
    if kind is str:
        return st.one_of(st.just(""), st.integers(), *common)
    numbers = [
        st.text("abcxyz ", min_size=1, max_size=5),
        st.integers(-(10**6), 0),
        st.floats(max_value=0.0, allow_nan=False),
        st.sampled_from([float("nan"), float("inf")]),
    ]
    if kind is int:
        numbers.append(st.floats(0.1, 1e6).filter(lambda f: not f.is_integer()))
    return st.one_of(*numbers, *common)


@st.composite
def malformed_specs(draw):
    doc = json.loads(json.dumps(T4_SPEC))  # a valid spec to break one way
    how = draw(st.sampled_from(["drop", "retype", "math", "top", "truncate"]))
    if how == "drop":
        del doc[draw(st.sampled_from(sorted(_REQUIRED)))]
    elif how == "retype":
        key = draw(st.sampled_from(sorted(_REQUIRED)))
        doc[key] = draw(_wrong_values(_REQUIRED[key]))
    elif how == "math":
        dtype = draw(st.sampled_from(sorted(doc["math"])))
        doc["math"] = draw(
            st.sampled_from(
                [
                    {},
                    {**doc["math"], "fp12": doc["math"][dtype]},
                    {**doc["math"], dtype: "fast"},
                    {**doc["math"], dtype: {**doc["math"][dtype], "tensor_cores": "yes"}},
                    {**doc["math"], dtype: {"tensor_cores": True}},
                ]
            )
        )
    elif how == "top":
        doc = draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text()))
    text = json.dumps(doc)
    if how == "truncate":  # every proper prefix of a JSON object is invalid JSON
        text = text[: draw(st.integers(1, len(text) - 1))]
    return text


@GENERATED
@given(text=malformed_specs())
def test_malformed_spec_documents(capsys, tmp_path, text):
    assert "fp12" not in DTYPES  # the unknown-dtype corruption relies on it
    path = tmp_path / f"spec{abs(hash(text))}.json"
    path.write_text(text)
    assert_one_line_error(*run(capsys, ["gemm", "64", "64", "64", "--gpu", str(path)]))
