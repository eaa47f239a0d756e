"""One run, one trace: the session caches traces and analyses, and a model
changed in a few leaf modules (a fix) is re-traced only where it changed."""

import pytest
import torch
from torch import nn

from dlperf.advice import fixes
from dlperf.run import Session, resolve
from dlperf.tracing.splice import changed_modules


class Mlp(nn.Module):
    def __init__(self, d=64, vocab=1000):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(x + self.down(self.act(self.up(x))))


def _totals(analysis):
    return {k: analysis.totals[k] for k in ("flops", "bytes", "kernels")}, analysis.time_s


def test_a_session_traces_a_run_once(monkeypatch):
    import dlperf.run

    calls = []
    real = dlperf.run.trace
    monkeypatch.setattr(dlperf.run, "trace", lambda *a, **k: calls.append(1) or real(*a, **k))
    session = Session()
    run = resolve(Mlp(), torch.empty(8, 64), gpu="a100", precision="amp-bf16")
    first = session.analysis(run)
    assert session.analysis(run) is first
    session.analysis(run, with_optimizer=False)  # a second analysis of the same trace
    assert len(calls) == 1


def test_changed_modules_finds_the_replaced_leaf():
    model = Mlp()
    fixed = fixes.pad_linear_outputs(model, {"head": 1024})
    assert changed_modules(model, fixed) == ["head"]
    assert changed_modules(model, fixes._copy(model)) == []


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16"])
@pytest.mark.parametrize("training", [True, False])
def test_a_spliced_trace_prices_like_a_whole_one(monkeypatch, precision, training):
    # the padded head (1000 -> 1024 outputs, sliced back to 1000) changes one leaf
    model = Mlp()
    x = torch.empty(32, 64)
    run = resolve(model, x, gpu="a100", precision=precision, training=training)
    fixed = fixes.pad_linear_outputs(model, {"head": 1024})
    session = Session()
    session.analysis(run)
    spliced = session.analysis(run.with_module(fixed))
    whole = Session().analysis(
        resolve(fixed, x, gpu="a100", precision=precision, training=training)
    )
    assert _totals(spliced)[0] == _totals(whole)[0]
    assert _totals(spliced)[1] == pytest.approx(_totals(whole)[1], rel=1e-12)
    assert sorted((r.module, r.op, r.phase) for r in spliced.rows) == sorted(
        (r.module, r.op, r.phase) for r in whole.rows
    )


def test_a_fix_that_unties_a_weight_is_spliced_like_a_whole_trace():
    # GPT-2's head shares the embedding's weight; the padded head (50257 -> 50264
    # outputs) has its own, so the backward addition of the tied weight's two
    # gradients (50257 x 768 each) is gone from the fixed model's step
    run = resolve("hf:gpt2:layers=1", gpu="a100", precision="amp-bf16", batch=2, seq_len=32)
    fixed = fixes.pad_linear_outputs(run.module, {"lm_head": 50264})
    session = Session()
    session.analysis(run)
    spliced_trace = session.trace(run.with_module(fixed))
    whole_run = resolve(fixed, run.inputs, gpu="a100", precision="amp-bf16")
    whole_trace = Session().trace(whole_run)
    assert spliced_trace.params == whole_trace.params
    assert spliced_trace.activation_bytes == whole_trace.activation_bytes
    spliced = session.analysis(run.with_module(fixed))
    whole = Session().analysis(whole_run)
    assert _totals(spliced)[0] == _totals(whole)[0]
    assert _totals(spliced)[1] == pytest.approx(_totals(whole)[1], rel=1e-12)
