"""MPT as llm-foundry trains it, for `bench/e2e.py`'s published MPT rows, as a
model file a user would write (`dlperf plan bench/mpt.py:mpt_7b ...`).

llm-foundry's `mpt_causal_lm` is a GPT-2-shaped decoder (learned positions,
LayerNorm, a 4x MLP with exact GELU, the head tied to the token embedding;
MPT has no biases, a few million parameters GPT-2's code adds back), so the
blocks are transformers' GPT-2 sized as MPT, attention through SDPA (flash
on the A100 under bf16). The difference that matters for memory is the
loss: `ComposerMPTCausalLM` defaults to `loss_fn: fused_crossentropy`,
flash-attn's cross-entropy kernel (llmfoundry/models/mpt/modeling_mpt.py,
`FusedCrossEntropyLoss(ignore_index=-100)`), which keeps the bf16 logits
and one log-sum-exp per token and writes the logits' gradient in bf16, where
PyTorch's cross-entropy (Hugging Face's loss) upcasts the logits to fp32
and saves an fp32 log-softmax: 3 x tokens x vocabulary x 4 B that the
smaller MPTs at their published micro-batches could not hold.

`FusedCrossEntropy` below runs that kernel's work as aten ops: the
log-sum-exp read of the logits forward; backward, the softmax, the one-hot
subtraction and the scale, in the logits' dtype. Targets are the labels
rolled by one, the last ignored, as `ComposerMPTCausalLM.get_targets` does.
"""

from __future__ import annotations

import torch
from torch import nn

# (d_model, n_layers, n_heads) of llm-foundry's benchmarking sizes, vocab 50368
SIZES = {
    "125m": (768, 12, 12),
    "350m": (1024, 24, 16),
    "760m": (1536, 24, 12),
    "1b": (2048, 24, 16),
    "3b": (2560, 32, 20),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 48, 56),
    "70b": (8192, 80, 64),
}
VOCAB = 50368
IGNORE = -100


class FusedCrossEntropy(torch.autograd.Function):
    """flash-attn's cross-entropy: saves the logits and a log-sum-exp per row."""

    @staticmethod
    def forward(ctx, logits, targets):
        lse = torch.logsumexp(logits, dim=-1)
        kept = targets != IGNORE
        picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        losses = (lse.float() - picked.float()) * kept
        count = kept.sum().clamp(min=1)
        ctx.save_for_backward(logits, lse, targets, count)
        return losses.sum() / count

    @staticmethod
    def backward(ctx, grad):
        logits, lse, targets, count = ctx.saved_tensors
        dlogits = torch.softmax(logits, dim=-1)  # exp(logits - lse), in the logits' dtype
        ones = torch.ones_like(targets, dtype=dlogits.dtype).unsqueeze(-1)
        dlogits.scatter_add_(-1, targets.clamp(min=0).unsqueeze(-1), -ones)
        dlogits.mul_((grad / count).to(dlogits.dtype))
        return dlogits, None


class MPTCausalLM(nn.Module):
    """GPT-2's blocks sized as MPT, with llm-foundry's fused cross-entropy."""

    def __init__(self, d_model: int, n_layers: int, n_heads: int, max_seq_len: int):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            n_embd=d_model,
            n_layer=n_layers,
            n_head=n_heads,
            vocab_size=VOCAB,
            n_positions=max_seq_len,
            activation_function="gelu",  # MPT's nn.GELU(approximate='none')
            attn_pdrop=0.0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
        )
        gpt2 = GPT2LMHeadModel(config)
        self.config = gpt2.config  # tie_word_embeddings: the head is the embedding
        self.transformer = gpt2.transformer
        self.lm_head = gpt2.lm_head

    def forward(self, input_ids, labels):
        hidden = self.transformer(input_ids=input_ids).last_hidden_state
        logits = self.lm_head(hidden)
        targets = torch.roll(labels, shifts=-1, dims=1)
        targets[:, -1] = IGNORE
        return FusedCrossEntropy.apply(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def _factory(size: str, max_seq_len: int):
    def build():
        ids = torch.zeros(1, max_seq_len, dtype=torch.int64)
        return MPTCausalLM(*SIZES[size], max_seq_len), {"input_ids": ids, "labels": ids}

    build.__name__ = f"mpt_{size}"
    return build


# One factory per published size (`bench/mpt.py:mpt_7b`); a sequence of 8192
# has its own (MPT's learned positions are max_seq_len long).
for _size in SIZES:
    globals()[f"mpt_{_size}"] = _factory(_size, 2048)
mpt_1b_s8192 = _factory("1b", 8192)
