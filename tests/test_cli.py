"""The command line: JSON documents and one-line errors with exit code 2."""

import argparse
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_gemm_json_seed_example(capsys):
    code, out, _ = run(
        capsys, "gemm", "8192", "128", "8192", "--gpu", "v100", "--dtype", "fp16", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    # the guides' example: 124.1 FLOPs/B, below the datasheet ridge 125e12 / 900e9 = 138.9
    assert round(doc["arithmetic_intensity"], 1) == 124.1
    assert round(doc["ridge_ops_per_byte"], 1) == 138.9
    # the verdict is the term that sets the predicted time (one rule, roofline.limiter)
    terms = {"math": doc["math_time_s"], "memory": doc["memory_time_s"]}
    assert doc["bound"] == max(terms, key=terms.get)
    code, out, _ = run(capsys, "gemm", "8192", "8192", "8192", "--gpu", "v100", "--json")
    doc = json.loads(out)
    assert int(doc["arithmetic_intensity"]) == 2730 and doc["bound"] == "math"


def test_gemm_terminal_output(capsys):
    code, out, _ = run(capsys, "gemm", "1024", "1024", "1020", "--gpu", "a100")
    assert code == 0
    assert "K=1020 is not a multiple of 8" in out.replace("\n", " ")


def test_gpus_json(capsys):
    code, out, _ = run(capsys, "gpus", "--json")
    ids = {g["id"] for g in json.loads(out)["gpus"]}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "t4"} <= ids


@pytest.mark.parametrize(
    "argv, message",
    [
        (["gemm", "1", "2", "3", "--gpu", "a10O"], "unknown GPU 'a10O'"),
        (["gemm", "1", "2", "3", "--gpu", "v100", "--dtype", "fp8"], "has no fp8 math"),
        (["gemm", "0", "2", "3"], "must be positive"),
        (["gemm", "1", "2", "x"], "is not a whole number"),
        (["gemm", "1", "2", "3", "--dtype", "fp13"], "invalid choice"),
        (["gemm", "1", "2", "3", "--gpu", "missing.toml"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own usage errors
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_module_entry_point_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "dlperf", "gemm", "64", "64", "64", "--gpu", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("dlperf: error: unknown GPU 'nope'")
    assert "Traceback" not in proc.stderr


# -- issue 10: one precision rule, defaults in --help, dlperf's own bugs ------------

TINY_CNN = "examples/tiny_cnn.py:model"


def test_auto_precision_follows_the_device():
    from dlperf import gpu
    from dlperf.precision import resolve_for

    assert resolve_for(gpu("a100"), "auto").name == "amp-bf16"
    assert resolve_for(gpu("v100"), "auto").name == "amp-fp16"  # Volta: fp16, no bf16
    assert resolve_for(gpu("m40"), "auto").name == "fp32"  # Maxwell: fp32 and fp64 only
    assert resolve_for(gpu("v100"), "fp16").name == "fp16"


def test_precision_the_device_lacks_is_refused_by_the_api():
    import torch

    import dlperf

    x = torch.empty(2, 8, device="meta")
    with pytest.raises(dlperf.DlperfError, match="v100-sxm2-16gb has no bf16 math; use --pre"):
        dlperf.analyze(torch.nn.Linear(8, 8), x, gpu="v100", precision="amp-bf16")
    with pytest.raises(dlperf.DlperfError, match="has no tf32 math"):
        dlperf.memory(torch.nn.Linear(8, 8), x, gpu="t4", precision="tf32")


def test_help_shows_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps (and hyphen-breaks) to the terminal
    for argv, shown in [
        (["analyze", "--help"], ["(default: a100)", "(default: auto)", "(default: adamw)"]),
        (["plan", "--help"], ["(default: 4 x GPUs x micro-batch)", "(default: 8)"]),
        (["measure", "--help"], ["(default: auto)", "(default: cpu)"]),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        for words in shown:
            assert words in text, (argv, words)
        assert "(default: None)" not in text and "(default: False)" not in text


def test_gpus_table_fits_80_columns_with_whole_ids():
    import io

    from rich.console import Console

    from dlperf import gpus
    from dlperf.rendering.terminal import gpus_table

    specs = gpus()
    for width in (80, 60):
        buffer = io.StringIO()
        gpus_table(specs, Console(file=buffer, width=width))
        lines = buffer.getvalue().splitlines()
        assert max(len(line) for line in lines) <= width
        cells = {cell.strip() for line in lines for cell in line.split("│")}
        assert {s.id for s in specs} <= cells  # every id whole, in a cell of its own
    wide = io.StringIO()
    gpus_table(specs, Console(file=wide, width=200))
    assert specs[0].name in wide.getvalue()  # a wide terminal keeps the names


def test_memory_fit_when_not_even_one_sample_fits(capsys, tmp_path):
    from pathlib import Path

    import tomllib

    spec = tomllib.loads(
        (Path(__file__).parents[1] / "src/dlperf/hardware/specs/t4.toml").read_text()
    )
    spec.update(id="t4-1mib", memory_bytes=2**20)  # less than the CUDA context alone
    path = tmp_path / "t4-1mib.json"
    path.write_text(json.dumps(spec))
    argv = ["memory", TINY_CNN, "--gpu", str(path), "--input", "2x3x32x32", "--fit"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "does not fit even at batch 1" in out and "largest batch that fits" not in out
    code, out, _ = run(capsys, *argv, "--json")
    assert json.loads(out)["max_batch"] == 0


def test_apply_takes_an_automatic_fix(capsys):
    argv = ["advise", TINY_CNN, "--input", "2x3x32x32", "--apply", "channels-last", "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert json.loads(out)["applied"] in ([], ["channels-last"])  # applied when it fires


def _break_gemm(monkeypatch):
    """A bug inside dlperf: the GEMM model raises a TypeError of its own."""
    import importlib

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand")

    monkeypatch.setattr(importlib.import_module("dlperf.kernels.gemm"), "gemm", broken)


def test_own_bug_is_one_line_exit_3(capsys, monkeypatch):
    _break_gemm(monkeypatch)
    code, out, err = run(capsys, "gemm", "64", "64", "64")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "dlperf bug" in err and "report" in err and "--debug" in err
    assert "TypeError: unsupported operand" in err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(capsys, monkeypatch, where):
    _break_gemm(monkeypatch)
    argv = ["gemm", "64", "64", "64"]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    code, _, err = run(capsys, *argv)
    assert code == 3
    assert "Traceback" in err and "dlperf bug" in err


def test_gemm_sizes_at_the_limit_stay_inside_int64():
    import warnings

    import dlperf
    from dlperf.kernels.gemm import MAX_MATRIX_ELEMENTS

    side = 2**24  # C = side x side holds exactly the limit of 2**48 elements
    assert side * side == MAX_MATRIX_ELEMENTS
    # a spec with memory enough for it (the catalogue's cards hold far less: refused)
    big = dataclasses.replace(dlperf.gpu("a100"), memory_bytes=2.0**60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy overflow warnings fail the test
        r = dlperf.gemm(side, side, 1, gpu=big)
    assert r.time_s > 0 and r.tiles > 0 and r.waves > 0
    with pytest.raises(dlperf.DlperfError, match="matrix C would hold"):
        dlperf.gemm(side + 1, side, 1, gpu=big)
    with pytest.raises(dlperf.DlperfError, match="more than the 80 GiB"):
        dlperf.gemm(side, side, 1, gpu="a100")


def test_api_takes_input_shapes_as_text():
    import torch

    import dlperf

    gpt = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=128,positions=64"
    a = dlperf.analyze(gpt, "2x16", gpu="a100")
    assert a.model == gpt and a.batch == 2
    named = dlperf.analyze(torch.nn.Linear(8, 4), ["3x8"], gpu="a100")
    assert named.model == "Linear" and named.batch == 3


def test_report_into_a_missing_folder_is_one_error(tmp_path):
    import torch

    import dlperf

    a = dlperf.analyze(torch.nn.Linear(8, 4), torch.empty(2, 8, device="meta"), gpu="a100")
    with pytest.raises(dlperf.DlperfError, match="cannot write .*No such file or directory"):
        dlperf.report(a, tmp_path / "missing" / "r.html")


# -- issue 11: a table-driven command line, all printing in rendering/ ------------

README = Path(__file__).parents[1] / "README.md"


def _verb_parsers():
    from dlperf.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def _flags(verb_parser) -> dict:
    return {flag: a for a in verb_parser._actions for flag in a.option_strings}


def test_readme_examples_parse():
    """Every `$ dlperf ...` example of the README parses as it stands."""
    parser, _ = _verb_parsers()
    lines = [line[2:] for line in README.read_text().splitlines() if line.startswith("$ dlperf ")]
    assert len(lines) >= 5
    for line in lines:
        argv = shlex.split(line.split(" | ")[0])[1:]  # the command, not a pipe after it
        assert parser.parse_args(argv).func, line


def test_readme_flags_and_choices_exist():
    """Every verb and flag the README names in `dlperf VERB ...` exists, and a
    flag's documented choices ({a,b}) are all accepted."""
    _, verbs = _verb_parsers()
    spans = [" ".join(s.split()) for s in re.findall(r"`(dlperf [^`]+)`", README.read_text())]
    checked = 0
    for span in spans:
        words = span.split()[1:]
        if words[0].startswith("-"):
            continue  # `dlperf --debug ...`: the top-level flags
        flags = _flags(verbs[words[0]])
        for word, after in zip(words, [*words[1:], ""], strict=True):
            flag = word.strip("[]")
            if not flag.startswith("--"):
                continue
            assert flag in flags, span
            checked += 1
            if after.startswith("{") and flags[flag].choices:
                assert set(after.strip("{}[]").split(",")) <= set(flags[flag].choices), span
    assert checked >= 15  # the README names many flags: the scan found them


def test_run_options_build_a_config_each_verb_accepts():
    """Each verb's parsed options build a `RunConfig` (every `api=` name is a
    field of it) that passes the verb's own check with the defaults."""
    from dlperf.cli.options import run_options
    from dlperf.run_config import APPLIES, RunConfig

    _, verbs = _verb_parsers()
    for verb in APPLIES:
        args = verbs[verb].parse_args(["hf:gpt2"])
        options = run_options(args)
        assert options["model"] == "hf:gpt2"
        RunConfig.build(**options).check(verb)


def test_cli_modules_print_nothing():
    """Handlers hand results to rendering/: no print or stdout write in the CLI
    (the one-line errors of `main` go to stderr)."""
    folder = Path(__file__).parents[1] / "src" / "dlperf" / "cli"
    for path in folder.glob("*.py"):
        text = path.read_text()
        assert "print(" not in text and "sys.stdout" not in text, path.name


@pytest.mark.parametrize(
    "argv, key",
    [
        (["gpus"], "gpus"),
        (["sweep", "--list"], "sweeps"),
        (["sweep"], "sweeps"),
        (["advise", "--list-rules"], "rules"),
    ],
)
def test_listings_print_one_json_document(capsys, argv, key):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)  # raises on anything but exactly one document
    assert list(doc) == [key] and doc[key]


def test_show_prints_json_or_renders(capsys):
    from dlperf.rendering.output import show

    class Result:
        def to_dict(self):
            return {"a": 1}

    shown = []
    show(Result(), lambda r, **options: shown.append(options), False, top=3)
    assert shown == [{"top": 3}] and capsys.readouterr().out == ""
    show(Result(), None, True)
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    show({"b": 2}, None, True)  # a plain document prints as it is
    assert json.loads(capsys.readouterr().out) == {"b": 2}
    show([1, 2], None, True, document=lambda r: {"n": len(r)})
    assert json.loads(capsys.readouterr().out) == {"n": 2}


def test_spinner_is_silent_when_quiet(capsys):
    from dlperf.rendering.progress import Spinner

    with Spinner("tracing", quiet=True) as tick:
        tick(10)  # the callback tracing calls: harmless when silent
    assert capsys.readouterr() == ("", "")


def test_a_reader_that_stops_early_is_not_an_error():
    # `dlperf analyze ... --json | head -c 100`: the JSON (hundreds of kB) overflows
    # the pipe once the reader has gone; dlperf stops quietly with status 0
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlperf",
            "analyze",
            "torchvision:resnet18",
            "--batch",
            "2",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0
    assert "Traceback" not in err and "error" not in err


def test_piped_output_is_whole_and_a_reader_may_stop_early():
    # issue 21, item 7: piped, a 64-GPU plan's table kept its last columns (throughput,
    # MFU) only when the console was wider than 140 columns; and `dlperf ... | head`
    # exited 1 (rich's answer to a closed pipe)
    argv = [sys.executable, "-m", "dlperf", "plan", "hf:gpt2:layers=2", "--gpu", "a100",
            "--gpus", "64"]  # fmt: skip
    whole = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert "MFU" in whole
    reader = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.readline()
    reader.stdout.close()  # as `head -1` does
    assert reader.wait(timeout=120) == 0
    assert reader.stderr.read() == b""


def _readme_examples() -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows for it) for each `$ dlperf`
    line in a text block; described output (in parentheses) and `...` are not
    the tool's words, and a line with `...` inside is checked up to it."""
    examples, command, parenthetical = [], None, False
    for line in README.read_text().splitlines():
        if line.startswith("$ dlperf "):
            command = line[2:]
            examples.append((command, []))
            parenthetical = False
        elif line.startswith("```"):
            command = None
        elif command is not None:
            parenthetical = parenthetical or line.startswith("(")
            if not parenthetical and line.strip() not in ("", "..."):
                examples[-1][1].append(line.split("...")[0].strip())
            parenthetical = parenthetical and not line.rstrip().endswith(")")
    return [(c, lines) for c, lines in examples if lines]


def test_readme_example_outputs_are_what_the_tool_prints():
    # issue 21: the README said 23.11 GiB where `dlperf memory hf:gpt2 ...` printed 13.81
    checked = 0
    for command, lines in _readme_examples():
        if not lines or "{" in lines[0]:
            continue  # a JSON sketch with placeholders
        argv, _, grep = command.partition(" | grep -E ")
        done = subprocess.run(
            [sys.executable, "-m", *shlex.split(argv)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, (command, done.stderr)
        out = done.stdout
        if grep:
            pattern = re.compile(shlex.split(grep)[0])
            out = "\n".join(x for x in out.splitlines() if pattern.search(x))
        printed = " ".join(out.split())
        for line in lines:
            assert " ".join(line.split()) in printed, (command, line)
        checked += 1
    assert checked >= 5


def test_json_follows_top_and_depth(capsys):
    # --top limits plan's JSON plans[] (the design's contract) and --depth sets the modules
    # of analyze's JSON, as they do the tables: neither was read for --json
    cnn = str(README.parent / "examples" / "tiny_cnn.py") + ":model"
    assert main(["plan", cnn, "--top", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["plans"]) == 2
    model = "hf:gpt2:layers=2,hidden=64,heads=2"
    for depth, deepest in ((1, 1), (3, 3)):
        assert main(["analyze", model, "--depth", str(depth), "--json"]) == 0
        modules = json.loads(capsys.readouterr().out)["modules"]
        assert max(name.count(".") + 1 for name in modules if name) == deepest


def test_whole_numbers_may_be_written_with_an_exponent():
    # issue 36, item 6: --tokens 1e9 was "not a whole number"
    import argparse

    from dlperf.cli.options import positive_int

    assert positive_int("1e9") == 1_000_000_000 and positive_int("2.0") == 2
    for text in ("1.5", "nan", "inf", "1e999999999", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_int(text)


def test_gpus_spec_takes_a_catalogue_name(capsys):
    # issue 36, item 6: `gpus --spec h100` said "spec file h100 does not exist"
    code, out, _ = run(capsys, "gpus", "--spec", "h100", "--json")
    assert code == 0 and json.loads(out)["spec"]["id"] == "h100-sxm5-80gb"
