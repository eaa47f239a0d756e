"""--loss eager|fused|chunked (tracing/losses.py): what each keeps for
backward and what it computes, derived for a tiny GPT-2."""

import math

import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.run import resolve
from dlperf.tracing import LOSS_MODULE, trace
from dlperf.tracing.losses import CROSS_ENTROPY_BACKWARD_OP, CROSS_ENTROPY_OP, chunk_rows

MODEL = "hf:gpt2:layers=1,hidden=64,heads=2"
BATCH, SEQ, VOCAB, HIDDEN = 2, 64, 50257, 64
N = BATCH * SEQ  # tokens, each with a label (not shifted)


def _trace(loss: str):
    run = resolve(MODEL, gpu="a100", batch=BATCH, seq_len=SEQ, precision="amp-bf16")
    return trace(run.module, run.inputs, precision=run.precision, loss=loss)


def _loss_saved(t) -> int:
    return sum(s.nbytes for s in t.saved if s.module == LOSS_MODULE)


def test_fused_keeps_the_bf16_logits_and_one_log_sum_exp_per_token():
    t = _trace("fused")
    # the logits as the head wrote them (bf16 under autocast), the fp32
    # log-sum-exp and the int64 targets: N x (V x 2 + 4 + 8) bytes
    assert _loss_saved(t) == N * (VOCAB * 2 + 4 + 8)
    backward = [e for e in t.events if e.op == CROSS_ENTROPY_BACKWARD_OP]
    assert len(backward) == 1
    # the gradient is written over the logits: no new tensor, the logits' storage
    (grad_backward,) = backward
    assert grad_backward.outputs == () and grad_backward.reads[1] in {
        s.storage for s in t.saved if s.module == LOSS_MODULE
    }


def test_eager_keeps_more_than_the_fused_kernel():
    # Hugging Face upcasts the logits to fp32 before PyTorch's cross-entropy
    # (its fp32 log-softmax saved): at least N x V x 4 bytes more than bf16 logits
    eager, fused = _trace("eager").activation_bytes, _trace("fused").activation_bytes
    assert eager - fused >= (N - BATCH) * VOCAB * 2


def test_chunked_never_holds_the_whole_logits_and_keeps_the_two_gradients():
    t = _trace("chunked")
    largest = max(o.numel for e in t.events for o in e.outputs)
    assert largest < N * VOCAB
    # saved: the hidden states' gradient (N x H) and the head weight's (V x H), bf16
    assert _loss_saved(t) == (N * HIDDEN + VOCAB * HIDDEN) * 2
    chunk = chunk_rows(N, VOCAB, HIDDEN)
    assert sum(e.op == CROSS_ENTROPY_OP for e in t.events) == math.ceil(N / chunk)
    # forward runs the head's three GEMMs (logits, their gradient through the
    # weight, the weight's gradient): 3 x 2 N V H FLOPs, and backward none
    analysis = dlperf.analyze(
        MODEL, gpu="a100", batch=BATCH, seq_len=SEQ, precision="amp-bf16", loss="chunked"
    )
    head = [r for r in analysis.rows if r.module == LOSS_MODULE and r.category == "contraction"]
    assert {r.phase for r in head} == {"forward"}
    assert sum(r.flops for r in head) == 3 * 2 * N * VOCAB * HIDDEN


def test_chunks_are_sized_as_liger_sizes_them():
    # ceil(V / H) parts of the rows, rounded up to a power of two
    assert chunk_rows(8192, 128256, 4096) == 256  # 32 parts: 256 rows
    assert chunk_rows(N, VOCAB, HIDDEN) == 1  # 786 parts of 128 rows: 1 row each
    assert chunk_rows(2048, 50257, 256) == 16  # 197 parts: 10.4 rows, rounded up to 16


def test_a_fused_loss_lowers_the_peak_of_a_large_vocabulary():
    common = dict(gpu="a100", batch=4, seq_len=512, precision="amp-bf16")
    eager = dlperf.memory(MODEL, **common)
    fused = dlperf.memory(MODEL, loss="fused", **common)
    chunked = dlperf.memory(MODEL, loss="chunked", **common)
    assert chunked.activations_bytes < fused.activations_bytes < eager.activations_bytes
    assert fused.peak_bytes < eager.peak_bytes


def test_a_loss_without_token_labels_or_without_training_is_refused():
    with pytest.raises(DlperfError, match="no token labels"):
        dlperf.analyze("torchvision:resnet18", batch=2, loss="fused")
    with pytest.raises(DlperfError, match="--infer has none"):
        dlperf.analyze(MODEL, training=False, loss="fused")
    with pytest.raises(DlperfError, match="unknown loss"):
        dlperf.analyze(MODEL, loss="liger")
