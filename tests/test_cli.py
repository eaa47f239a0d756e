"""The command line: JSON documents and one-line errors with exit code 2."""

import json
import subprocess
import sys

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
    assert round(doc["arithmetic_intensity"], 1) == 124.1
    assert doc["bound"] == "memory"
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
