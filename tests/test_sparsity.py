"""--sparsity 2:4 (ops/sparse.py): the sparse GEMM priced by hand, where it
gains and where it cannot, and the GPUs and precisions that refuse it."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import DlperfError


def _linear_rows(model, x, sparsity, training=False, gpu="a100"):
    a = dlperf.analyze(model, x, gpu=gpu, precision="bf16", training=training, sparsity=sparsity)
    return [r for r in a.rows if r.category == "contraction"]


def test_a_sparse_forward_gemm_priced_by_hand():
    # Linear(256 -> 512) on 1024 rows in bf16: Y[1024, 512] = X[1024, 256] W^T + b
    model, x = nn.Linear(256, 512), torch.empty(1024, 256, device="meta")
    (dense,) = _linear_rows(model, x, None)
    (sparse,) = _linear_rows(model, x, "2:4")
    assert dense.flops == 2 * 1024 * 512 * 256  # 268,435,456
    assert sparse.flops == dense.flops / 2  # two of every four weights multiply
    # moved: X 1024 x 256 x 2 = 524,288 B; W compressed: 512 x 256 elements at
    # 2/2 B of kept values + 1/8 B of 2-bit indices = 147,456 B (56% of 262,144);
    # the bias 512 x 2 = 1,024 B; Y 1024 x 512 x 2 = 1,048,576 B
    assert sparse.bytes == 524_288 + 147_456 + 1_024 + 1_048_576
    assert dense.bytes == 524_288 + 262_144 + 1_024 + 1_048_576


def test_a_memory_bound_gemm_gains_nothing_and_a_math_bound_one_nearly_twice():
    # 65536 rows through a 64 -> 64 layer: the activations (8 MiB in, 8 MiB out)
    # are the traffic, the 8 KiB weight nothing: 2:4 saves 3.5 KiB of it
    narrow, rows = nn.Linear(64, 64), torch.empty(65536, 64, device="meta")
    (dense,) = _linear_rows(narrow, rows, None)
    (sparse,) = _linear_rows(narrow, rows, "2:4")
    assert dense.bound.value == "memory"
    assert sparse.time_s == pytest.approx(dense.time_s, rel=0.02)
    # 8192^3 in bf16: math-bound; half the math on the sparse path
    wide, square = nn.Linear(8192, 8192), torch.empty(8192, 8192, device="meta")
    (dense,) = _linear_rows(wide, square, None)
    (sparse,) = _linear_rows(wide, square, "2:4")
    assert dense.bound.value == "math"
    assert 0.45 < sparse.time_s / dense.time_s < 0.6


def test_training_runs_forward_and_input_gradient_sparse_and_the_weight_gradient_dense():
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    x = torch.empty(256, 512, device="meta", requires_grad=True)
    rows = _linear_rows(model, x, "2:4", training=True)
    roles = sorted(g.role for r in rows for g in r.gemms)
    assert roles.count("2:4 sparse fprop") == 2
    assert roles.count("2:4 sparse dgrad") == 2
    assert roles.count("") == 2  # each layer's weight gradient: dense
    # training prunes and compresses each weight again per step: charged on dgrad
    dgrad = [r for r in rows if any(g.role == "2:4 sparse dgrad" for g in r.gemms)]
    assert all("pruned and compressed each step" in " ".join(r.notes) for r in dgrad)


@pytest.mark.parametrize(
    ("gpu", "precision", "says"),
    [
        ("v100", "amp-fp16", "no sparse Tensor Cores"),
        ("t4", "amp-fp16", "no sparse Tensor Cores"),
        ("a100", "fp32", "priced for tf32, fp16, bf16"),
    ],
)
def test_sparsity_is_refused_without_sparse_tensor_cores(gpu, precision, says):
    with pytest.raises(DlperfError, match=says):
        dlperf.analyze("hf:gpt2:layers=1", gpu=gpu, precision=precision, sparsity="2:4")


def test_the_advice_names_math_bound_layers_and_says_it_changes_outputs():
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    x = torch.empty(4096, 4096, device="meta")
    advice = dlperf.advise(model, x, gpu="a100", precision="bf16")
    (found,) = [f for f in advice.findings if f.rule == "sparsity-2-4"]
    assert set(found.modules) == {"0", "2"}
    assert "changes the model's outputs" in found.fix
    # its gain is the step re-analysed with every linear layer pruned
    dense = dlperf.analyze(model, x, gpu="a100", precision="bf16")
    sparse = dlperf.analyze(model, x, gpu="a100", precision="bf16", sparsity="2:4")
    assert found.gain_time_s == pytest.approx(dense.time_s - sparse.time_s)
    # advice only: no automatic fix
    from dlperf.advice import mechanical_rules

    assert "sparsity-2-4" not in mechanical_rules()
    # no sparse Tensor Cores on a V100: no finding
    v100 = dlperf.advise(model, x, gpu="v100", precision="amp-fp16")
    assert not [f for f in v100.findings if f.rule == "sparsity-2-4"]


def test_the_text_report_says_the_run_is_sparse(capsys):
    """`--sparsity 2:4` is named in the text output, with how many GEMMs run sparse."""
    from dlperf.cli import main

    gpt = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=128,positions=64"
    assert main(["analyze", gpt, "--gpu", "a100", "--sparsity", "2:4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # a training step (analyze's default) of one block: c_attn, c_proj, c_fc, the MLP's
    # c_proj and the LM head, each with its forward and input-gradient GEMM sparse: 10
    assert "2:4 sparsity: 10 linear-layer GEMMs on sparse Tensor Cores" in out
