"""The loss of a language model's step as the trainer runs it (`--loss`).

- eager: the model's own code (Hugging Face upcasts the logits to fp32 and
  calls PyTorch's cross-entropy: an fp32 log-softmax saved, fp32 logit-sized
  gradients in backward). torchtitan upcasts too.
- fused: a fused cross-entropy kernel (flash-attn's, which llm-foundry and the
  flash-attn trainer call): forward reads the logits in their own dtype once
  and keeps one fp32 log-sum-exp per token beside them; backward writes the
  logits' gradient over the logits (`dlperf::cross_entropy[_backward]`).
- chunked: a linear cross-entropy that never holds the whole logits (Liger's
  fused linear cross-entropy): the head's GEMM, the loss and its gradient
  run chunk by chunk in forward, keeping the gradients of the hidden states
  and of the head's weight for backward. Chunks hold about as many logits
  as the hidden states have elements, as Liger sizes them: ceil(N / ceil(V
  / H)) rows, rounded up to a power of two.

fused and chunked take the model's logits or hidden states and its token
labels (one per input token, as `hf:` language models are given them). The
labels are not shifted: a sequence's last token is priced with the others
(one token in `seq_len`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..errors import DlperfError

LOSSES = ("eager", "fused", "chunked")
CROSS_ENTROPY_OP = "dlperf.cross_entropy.default"
CROSS_ENTROPY_BACKWARD_OP = "dlperf.cross_entropy_backward.default"


@torch.library.custom_op("dlperf::cross_entropy", mutates_args=())
def cross_entropy(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(mean loss, fp32 log-sum-exp per row) of (N, V) logits; traced only."""
    raise NotImplementedError("dlperf::cross_entropy is traced on fake tensors only")


@cross_entropy.register_fake
def _(logits, targets):
    lse = logits.new_empty(logits.shape[:-1], dtype=torch.float32)
    return logits.new_empty((), dtype=torch.float32), lse


@torch.library.custom_op("dlperf::cross_entropy_backward", mutates_args=("logits",))
def cross_entropy_backward(grad: Tensor, logits: Tensor, lse: Tensor, targets: Tensor) -> None:
    """Overwrite the logits with their gradient (softmax less the one-hot,
    times the incoming gradient over the row count); traced only."""
    raise NotImplementedError("dlperf::cross_entropy_backward is traced on fake tensors only")


@cross_entropy_backward.register_fake
def _(grad, logits, lse, targets):
    return None


def _setup_context(ctx, inputs, output) -> None:
    logits, targets = inputs
    _, lse = output
    ctx.save_for_backward(logits, lse, targets)
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)  # the log-sum-exp gets no gradient, not zeros


def _backward(ctx, grad, _lse_grad):
    logits, lse, targets = ctx.saved_tensors
    cross_entropy_backward(grad, logits, lse, targets)
    return logits, None


cross_entropy.register_autograd(_backward, setup_context=_setup_context)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Liger's fused linear cross-entropy: forward does the work of both passes."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
        rows, size = hidden.shape
        vocab = weight.shape[0]
        chunk = chunk_rows(rows, vocab, size)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, rows, chunk):
            piece = hidden[start : start + chunk]
            logits = piece @ weight.t()
            loss, lse = cross_entropy(logits, targets[start : start + chunk])
            cross_entropy_backward(loss.new_ones(()), logits, lse, targets[start : start + chunk])
            torch.mm(logits, weight, out=grad_hidden[start : start + chunk])
            grad_weight.addmm_(logits.t(), piece)
            total = total + loss
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total

    @staticmethod
    def backward(ctx, grad):
        # The step's loss is what backward starts from (its gradient is one):
        # the kept gradients go on as they are, as Liger skips the scaling then.
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden, grad_weight, None


def chunk_rows(rows: int, vocab: int, hidden: int) -> int:
    """Liger's chunk: the rows split into ceil(V / H) parts, a power of two."""
    parts = math.ceil(vocab / hidden)
    return 1 << max(0, math.ceil(math.log2(math.ceil(rows / parts))))


def traced_loss(model: nn.Module, call, kind: str) -> Tensor:
    """Run `model` on the fake call and return its loss as `kind` computes it."""
    labels = call.kwargs.get("labels")
    if not isinstance(labels, Tensor) or labels.dim() != 2:
        raise DlperfError(
            f"--loss {kind} replaces a language model's token cross-entropy, and this model's "
            "inputs carry no token labels: use --loss eager (or an hf: causal language model)"
        )
    kwargs = {k: v for k, v in call.kwargs.items() if k != "labels"}
    targets = labels.reshape(-1)
    if kind == "fused":
        out = functional_call(model, call.state, call.args, kwargs)
        logits = _logits(out, kind)
        loss, _ = cross_entropy(logits.reshape(-1, logits.shape[-1]), targets)
        return loss
    base, key = _base_and_head_weight(model)
    state = {f"model.{name}": value for name, value in call.state.items()}
    out = functional_call(_Base(model, base), state, call.args, kwargs)
    hidden = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
    weight = call.state[key]
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else weight.dtype
    with torch.autocast("cpu", enabled=False):
        flat = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
        return _ChunkedLinearCrossEntropy.apply(flat, weight.to(dtype), targets)


def _logits(out, kind: str) -> Tensor:
    logits = getattr(out, "logits", out)
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    if not isinstance(logits, Tensor) or logits.dim() != 3:
        raise DlperfError(
            f"--loss {kind} needs the model's token logits (batch, seq, vocabulary); "
            "use --loss eager for this model"
        )
    return logits


class _Base(nn.Module):
    """Calls a model's base (the decoder without its head), under the model's names."""

    def __init__(self, model: nn.Module, base: nn.Module):
        super().__init__()
        self.model = model
        self.base_path = next(name for name, m in model.named_modules() if m is base)

    def forward(self, *args, **kwargs):
        return self.model.get_submodule(self.base_path)(*args, **kwargs)


def _base_and_head_weight(model: nn.Module) -> tuple[nn.Module, str]:
    """The model under its output head (a linear map), and the head weight's
    name among the parameters (a tied head's is the embedding's)."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    base = getattr(model, "base_model", None)
    if not isinstance(head, nn.Linear) or base is None or base is model:
        raise DlperfError(
            "--loss chunked runs the output head with the loss, so it needs a Hugging Face "
            "causal language model (an output embedding and a base model): use --loss fused"
        )
    key = next(name for name, p in model.named_parameters() if p is head.weight)
    return base, key
