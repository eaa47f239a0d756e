"""MPT as llm-foundry trains it, for `bench/e2e.py`'s published MPT rows, as a
model file a user would write (`dlperf plan bench/mpt.py:mpt_7b ...`).

llm-foundry's `mpt_causal_lm` is a GPT-2-shaped decoder (learned positions,
LayerNorm, a 4x MLP with exact GELU, the head tied to the token embedding;
MPT has no biases, a few million parameters GPT-2's code adds back), so the
blocks are transformers' GPT-2 sized as MPT, attention through SDPA (priced as
the kernel `--attention` names: `bench/e2e.py` gives `flash1`, the flash-attn
1.x kernels the published tables ran). The difference that matters for memory is the
loss: `ComposerMPTCausalLM` defaults to `loss_fn: fused_crossentropy`,
flash-attn's cross-entropy kernel (llmfoundry/models/mpt/modeling_mpt.py,
`FusedCrossEntropyLoss(ignore_index=-100)`), which keeps the bf16 logits
and one log-sum-exp per token and writes the logits' gradient in bf16, where
PyTorch's cross-entropy (Hugging Face's loss) upcasts the logits to fp32
and saves an fp32 log-softmax: 3 x tokens x vocabulary x 4 B that the
smaller MPTs at their published micro-batches could not hold. That is
dlperf's `--loss fused` (`bench/e2e.py` gives it): the model returns its
logits, and dlperf runs the fused kernel on them. Called with labels it
computes the eager loss, as Hugging Face's code does.
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


class MPTCausalLM(nn.Module):
    """GPT-2's blocks sized as MPT; its logits, or with labels the eager loss."""

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

    def forward(self, input_ids, labels=None):
        hidden = self.transformer(input_ids=input_ids).last_hidden_state
        logits = self.lm_head(hidden)
        if labels is None:
            return logits
        targets = torch.roll(labels, shifts=-1, dims=1)
        targets[:, -1] = IGNORE
        flat = logits.view(-1, logits.shape[-1]).float()  # as Hugging Face upcasts
        return nn.functional.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE)


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
