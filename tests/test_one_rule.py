"""Contracts that keep one source of truth: the op registry names real aten
ops, `dlperf gemm` and `dlperf analyze` give one limiter for one GEMM, and
facts stated once (optimizer states, efficiency defaults) agree everywhere."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.kinds import Category
from dlperf.ops import aten_packet, register, registered_packets


def test_every_registered_key_is_an_aten_op_of_the_installed_torch():
    own = [p for p in registered_packets() if p.startswith("dlperf.")]
    aten = [p for p in registered_packets() if not p.startswith("dlperf.")]
    rnn = [f"dlperf.rnn.{mode}" for mode in ("gru", "lstm", "rnn_relu", "rnn_tanh")]
    # the fused attention events are dlperf's own custom ops (tracing/attention.py)
    attention = ["dlperf.attention.default", "dlperf.attention_backward.default"]
    # and so are the mixture-of-experts layers' (tracing/moe.py)
    moe = ["dlperf.moe.default", "dlperf.moe_backward.default"]
    # and the fused cross-entropy of --loss fused and chunked (tracing/losses.py)
    loss = ["dlperf.cross_entropy.default", "dlperf.cross_entropy_backward.default"]
    assert own == sorted([*attention, *loss, *moe, *rnn])
    custom = attention + moe + loss
    assert all(hasattr(torch.ops.dlperf, name.split(".")[1]) for name in custom)
    missing = [p for p in aten if aten_packet(p) is None]
    assert missing == []


def test_registering_an_op_torch_lacks_fails_at_once():
    with pytest.raises(ValueError, match="not an aten op"):
        # there is no in-place where
        register("aten.where_", category=Category.ELEMENTWISE, family="where")(lambda e, c: None)


@pytest.mark.parametrize(
    "m, n, k, dtype, gpu",
    [
        (8192, 128, 8192, "fp16", "v100"),  # the guides' memory-limited example
        (8192, 8192, 8192, "fp16", "v100"),  # the guides' math-limited example
        (16, 64, 64, "fp16", "a100"),  # tiny: latency
        (4096, 1024, 1000, "bf16", "h100"),  # K not a multiple of 64
    ],
)
def test_gemm_and_analyze_give_one_limiter(m, n, k, dtype, gpu):
    # A bias-free linear layer y = x W^T with x [m, k] and W [n, k] is one GEMM
    # C[m, n] = A[m, k] B[k, n] in the forward pass.
    layer = nn.Linear(k, n, bias=False, device="meta")
    x = torch.empty(m, k, device="meta")
    precision = {"fp16": "fp16", "bf16": "bf16"}[dtype]
    analysis = dlperf.analyze(layer, x, gpu=gpu, precision=precision, training=False)
    (row,) = [r for r in analysis.rows if r.gemms]
    assert (row.gemms[0].m, row.gemms[0].n, row.gemms[0].k) == (m, n, k)
    assert row.bound == dlperf.gemm(m, n, k, dtype=dtype, gpu=gpu).bound


def test_adafactor_state_is_one_formula_for_memory_and_time():
    from dlperf.optimizer import factored_state_elements, state_bytes
    from dlperf.training_memory import optimizer_bytes

    # matrix (300, 200): a row statistic of 300 and a column statistic of 200
    assert factored_state_elements((300, 200)) == 500
    # conv weight (64, 32, 3, 3): rows over (64, 32, 3) = 6144, columns over (64, 32, 3) = 6144
    assert factored_state_elements((64, 32, 3, 3)) == 64 * 32 * 3 + 64 * 32 * 3
    # a vector keeps its full second moment
    assert factored_state_elements((50,)) == 50
    shapes = [(300, 200), (64, 32, 3, 3), (50,)]
    params = 300 * 200 + 64 * 32 * 9 + 50
    expected = 4 * (500 + 12288 + 50)
    assert optimizer_bytes("adafactor", params, shapes) == expected
    assert state_bytes("adafactor", params, shapes, word_bytes=4) == expected


def test_efficiency_defaults_have_one_source():
    from dlperf.hardware.spec import Efficiency, _architecture_defaults

    table = _architecture_defaults()["default"]
    assert set(table) == set(Efficiency.field_names())
    assert Efficiency.defaults().batched_min_tile_area == table["batched_min_tile_area"]
