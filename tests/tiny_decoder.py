"""A user's own decoder for `dlperf serve` tests: its forward takes a KV cache
through the Hugging Face Cache protocol (`past_key_values.update(k, v, layer)`,
`get_seq_length()`), as any model served by an engine keeps one."""

import torch
from torch import nn
from torch.nn import functional as F

HIDDEN, HEADS, LAYERS, VOCAB = 64, 4, 2, 100


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)

    def forward(self, x, cache, index):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, -1).transpose(1, 3).unbind(2)
        if cache is not None:
            k, v = cache.update(k, v, index)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, HIDDEN))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, past_key_values=None):
        x = self.embed(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, past_key_values, i)
        return self.head(x[:, -1:])


def model():
    return TinyDecoder(), torch.zeros(2, 8, dtype=torch.int64)
