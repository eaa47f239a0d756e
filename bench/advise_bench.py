"""`dlperf advise` on common models: findings, predicted gain, time taken.

Run: python bench/advise_bench.py
"""

from __future__ import annotations

import time

import torch
from torch import nn

import dlperf


class Translator(nn.Module):
    """A GNMT-like LSTM translation model: embeddings, a 4-layer encoder and decoder."""

    def __init__(self, vocab=32000, hidden=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.encoder = nn.LSTM(hidden, hidden, num_layers=4)
        self.decoder = nn.LSTM(hidden, hidden, num_layers=4)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        memory, _ = self.encoder(x)
        out, _ = self.decoder(memory)
        return self.head(out)


MODELS = [
    ("torchvision:resnet50", None, "amp-fp16", {"batch": 64}),
    ("torchvision:mobilenet_v2", None, "amp-fp16", {"batch": 64}),
    ("torchvision:efficientnet_b0", None, "amp-fp16", {"batch": 64}),
    ("hf:gpt2", None, "amp-fp16", {"batch": 8, "seq_len": 512}),
    ("hf:bert-base-uncased", None, "amp-fp16", {"batch": 8, "seq_len": 512}),
    ("LSTM translator (GNMT-like)", Translator, "amp-fp16", {}),
]


def main() -> int:
    print(f"{time.strftime('%Y-%m-%d')}, 2-core CPU")
    print("| model | GPU | findings (gain) | predicted step -> after | time |")
    print("|---|---|---|---|---|")
    for name, factory, precision, sizes in MODELS:
        for gpu in ("a100", "h100"):
            start = time.perf_counter()
            if factory:
                with torch.device("meta"):
                    model = factory()
                inputs = torch.zeros(50, 64, dtype=torch.long, device="meta")  # seq 50, batch 64
                a = dlperf.advise(model, inputs, gpu=gpu, precision=precision)
            else:
                a = dlperf.advise(name, gpu=gpu, precision=precision, **sizes)
            took = time.perf_counter() - start
            found = ", ".join(
                f"{f.rule}" + (f" ({f.gain_fraction:.0%})" if f.gain_time_s else "")
                for f in a.findings
            )
            print(
                f"| {name} | {a.gpu} | {found or 'none'} | "
                f"{a.predicted_time_s * 1e3:.1f} -> {a.predicted_time_after_s * 1e3:.1f} ms "
                f"({a.predicted_time_s / a.predicted_time_after_s:.2f}x) | {took:.1f} s |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
