"""The user's own model files: built without weights, their errors in one line,
and dlperf's own bugs reported as dlperf's, not the user's."""

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf import tracing
from dlperf.cli import main
from dlperf.errors import DlperfError, InternalError, raised_by_dlperf
from dlperf.models import load_model

ROOT = Path(__file__).resolve().parents[1]
DECODER = ROOT / "examples" / "decoder.py"


def _model_file(tmp_path, body: str) -> Path:
    path = tmp_path / "user_model.py"
    path.write_text("import torch\nfrom torch import nn\n\n" + textwrap.dedent(body))
    return path


def _one_line_error(capfd, argv) -> str:
    """Run the CLI, expect exit 2 and exactly one line on stderr; return it."""
    assert main(argv) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


# -- built without weights ------------------------------------------------------


def test_user_factory_is_built_on_the_meta_device(tmp_path):
    path = _model_file(
        tmp_path,
        """
        def model():
            return nn.Sequential(nn.Linear(64, 32), nn.ReLU()), torch.randn(4, 64)
        """,
    )
    loaded = load_model(f"{path}:model")
    assert all(p.is_meta for p in loaded.module.parameters())
    # the factory's real input tensor became meta too: its shape is what counts
    assert loaded.inputs.shape == (4, 64)
    a = dlperf.analyze(loaded.module, loaded.inputs, gpu="a100", precision="fp32")
    assert a.params == 64 * 32 + 32  # weight + bias


def test_constructor_that_reads_tensor_values_falls_back_per_parameter(tmp_path):
    # .item() cannot run on the meta device: the fallback runs the constructor
    # for real and sends each parameter to meta as it is registered
    path = _model_file(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                width = int(torch.tensor([8, 16]).sum().item())
                self.layers = nn.Sequential(nn.Linear(width, width), nn.Linear(width, 2))

            def forward(self, x):
                return self.layers(x)

        def model():
            return Net(), torch.zeros(3, 24)
        """,
    )
    loaded = load_model(f"{path}:model")
    assert all(p.is_meta for p in loaded.module.parameters())
    assert loaded.module.layers[0].in_features == 8 + 16


def test_factory_that_moves_its_model_to_a_device_still_loads(tmp_path):
    # .to("cpu") cannot copy out of meta tensors: such a factory is built as written
    path = _model_file(
        tmp_path,
        """
        def model():
            return nn.Linear(8, 8).to("cpu"), torch.zeros(2, 8)
        """,
    )
    loaded = load_model(f"{path}:model")
    assert loaded.module.weight.device.type == "cpu"


def test_build_real_gives_initialised_weights(tmp_path):
    path = _model_file(
        tmp_path,
        """
        class Scale(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.full((4,), 0.5))
                self.register_buffer("mask", torch.ones(4))

            def forward(self, x):
                return x * self.w * self.mask

        def model():
            return Scale(), torch.zeros(2, 4)
        """,
    )
    loaded = load_model(f"{path}:model")
    assert loaded.module.w.is_meta
    real = loaded.build_real()
    assert torch.equal(real.w.detach(), torch.full((4,), 0.5))
    assert torch.equal(real.mask, torch.ones(4))


def _limit_address_space():
    # a safety net: a regression that allocates the weights fails fast here
    # instead of filling the machine's memory (torch alone maps about 4 GiB)
    limit = 10 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_7b_user_model_is_analyzed_in_under_2_gb(tmp_path):
    # examples/decoder.py: 32 layers of hidden 4096 with a gated MLP of 11008 and
    # a 32000-token vocabulary, 6.74e9 parameters; its fp32 weights alone are
    # 4 B x 6.74e9 = 27 GB, so staying under 2 GB means no weights were built
    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="2")
    # the child reports its own peak RSS (RUSAGE_CHILDREN would mix in every
    # earlier child of this test process)
    script = (
        "import resource, sys\n"
        "from dlperf.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "sys.stderr.write(f'peak_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}')\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "analyze", f"{DECODER}:model", "--gpu", "h100"]
        + ["--precision", "amp-bf16", "--input", "1x16:int64", "--json"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_limit_address_space,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak_kib = int(done.stderr.rsplit("peak_kib=", 1)[1])  # Linux: KiB
    assert peak_kib < 2 * 1024 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"
    assert '"params": 6738681856' in done.stdout  # 32 x 202391552 + 2 x 131072000 + 8192


# -- the user's errors, in one line ---------------------------------------------


def test_factory_that_raises_gives_one_line(tmp_path, capfd):
    path = _model_file(
        tmp_path,
        """
        def model():
            raise ValueError("no such layer size")
        """,
    )
    err = _one_line_error(capfd, ["analyze", f"{path}:model"])
    # the raise is on line 6: two import lines, a blank line, a blank line, def
    assert "ValueError: no such layer size" in err and "user_model.py line 6" in err


def test_factory_that_needs_arguments_gives_one_line(tmp_path, capfd):
    path = _model_file(
        tmp_path,
        """
        def model(width, depth=2):
            return nn.Linear(width, width)
        """,
    )
    err = _one_line_error(capfd, ["analyze", f"{path}:model"])
    assert "needs arguments (width)" in err


def test_factory_that_runs_out_of_memory_gives_one_line(tmp_path, capfd):
    # 2^60 bytes (1 EiB) on an explicit CPU device: no machine can allocate it
    path = _model_file(
        tmp_path,
        """
        def model():
            table = torch.empty(2**60, dtype=torch.uint8, device="cpu")
            return nn.Linear(2, 2)
        """,
    )
    err = _one_line_error(capfd, ["analyze", f"{path}:model"])
    assert "ran out of memory" in err


def test_shape_mismatch_is_one_line_without_torch_log_or_item_hint(tmp_path, capfd):
    path = _model_file(
        tmp_path,
        """
        def model():
            return nn.Sequential(nn.Linear(10, 5), nn.ReLU()), torch.zeros(2, 7)
        """,
    )
    err = _one_line_error(capfd, ["analyze", f"{path}:model"])
    assert "tracing failed in 0 (Linear)" in err and "[2, 7] X [10, 5]" in err
    assert ".item()" not in err


def test_data_dependent_model_gets_the_item_hint(tmp_path, capfd):
    path = _model_file(
        tmp_path,
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                keep = int(x.sum().item())
                return self.fc(x)[:keep]

        def model():
            return Net(), torch.zeros(2, 4)
        """,
    )
    err = _one_line_error(capfd, ["analyze", f"{path}:model"])
    assert "DataDependentOutputException" in err and ".item()" in err


# -- dlperf's own bugs ----------------------------------------------------------


def _users_code():
    raise KeyError("from the user's code")


def test_raised_by_dlperf_looks_at_the_innermost_frame():
    with pytest.raises(KeyError) as user:
        _users_code()
    assert not raised_by_dlperf(user.value)
    with pytest.raises(RuntimeError) as library:
        torch.zeros(2, 3) @ torch.zeros(2, 3)  # torch refuses the user's shapes
    assert not raised_by_dlperf(library.value)
    with pytest.raises(AttributeError) as ours:
        tracing.within(None, "a")  # None has no startswith: raised inside dlperf
    assert raised_by_dlperf(ours.value)
    assert not raised_by_dlperf(KeyError("never raised"))


def test_a_bug_in_tracing_is_reported_as_dlperfs(monkeypatch):
    monkeypatch.setattr(tracing.recorder, "_NAMES", None)  # every recorded call now fails
    with pytest.raises(InternalError, match="dlperf bug.*report it") as err:
        tracing.trace(torch.nn.Linear(4, 4), torch.zeros(2, 4))
    assert not isinstance(err.value, DlperfError)  # never the user's fault
    assert "dlperf/tracing/recorder.py" in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value.__cause__, AttributeError)


def test_a_bug_in_model_loading_is_reported_as_dlperfs(monkeypatch):
    pytest.importorskip("transformers")
    from dlperf import models

    monkeypatch.setattr(models.huggingface, "HEADS", None)
    with pytest.raises(InternalError, match="dlperf bug"):
        load_model("hf:gpt2:layers=1")
