"""A 7B-parameter decoder written with plain nn.Linear layers, to try dlperf on
a large model of your own:

    dlperf analyze examples/decoder.py:model --gpu h100 --precision amp-bf16 --batch 1

dlperf builds it without weights (on the meta device), so the analysis takes
seconds and little memory although its fp32 weights would need 27 GB.
`model()` returns the module and token ids of shape (batch, seq).
"""

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.norm2 = nn.LayerNorm(hidden)
        self.gate = nn.Linear(hidden, mlp, bias=False)
        self.up = nn.Linear(hidden, mlp, bias=False)
        self.down = nn.Linear(mlp, hidden, bias=False)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(hidden, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, hidden))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))  # gated MLP, as in Llama


class Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, mlp: int, vocab: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, mlp) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def model(layers=32, hidden=4096, heads=32, mlp=11008, vocab=32000, batch=1, seq=512):
    """The decoder and a batch of token ids (their values never matter to dlperf)."""
    ids = torch.zeros(batch, seq, dtype=torch.int64)
    return Decoder(layers, hidden, heads, mlp, vocab), ids
