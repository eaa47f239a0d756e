"""A GPT layer as Korthikanti et al. (2022) count it: pre-norm, fused QKV,
explicit attention with softmax and dropout, GeLU MLP, dropout after each
block. Used by the memory tests."""

import torch
from torch import nn


class GPTLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_drop = nn.Dropout(dropout)
        self.proj = nn.Linear(hidden, hidden)
        self.drop1 = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x):  # x: (s, b, h), Megatron's layout
        s, b, h = x.shape
        a, d = self.heads, h // self.heads
        q, k, v = self.qkv(self.ln1(x)).view(s, b * a, 3 * d).transpose(0, 1).chunk(3, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) / d**0.5
        probs = self.attn_drop(torch.softmax(scores, dim=-1))
        context = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, h)
        x = x + self.drop1(self.proj(context))
        return x + self.drop2(self.fc2(self.act(self.fc1(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int):
        super().__init__()
        self.layers = nn.ModuleList(GPTLayer(hidden, heads) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
