"""Predicted vs measured on this machine's CPU, with its probed spec.

Targets: whole step within 20%, per-op median absolute error within 30%.
Run: python bench/cpu_accuracy.py
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

import dlperf
import dlperf.models


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(512, 512, num_layers=2)
        self.head = nn.Linear(512, 512)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def cases():
    import torchvision

    yield "resnet18 b8 forward", torchvision.models.resnet18(), torch.empty(8, 3, 224, 224), False
    yield (
        "resnet18 b8 training step",
        torchvision.models.resnet18(),
        torch.empty(8, 3, 224, 224),
        True,
    )
    loaded = dlperf.models.load_model("hf:gpt2:layers=4", batch=4, seq_len=128)
    yield "GPT-2 4 layers, seq 128, b4, training step", loaded.module, loaded.inputs, True
    yield "LSTM 2 x 512, seq 64, b16, training step", LSTMModel(), torch.empty(64, 16, 512), True


def main() -> int:
    spec = dlperf.gpu("cpu")
    print(
        f"{time.strftime('%Y-%m-%d')}: {spec.name}; fp32 matmul "
        f"{spec.peak_flops_per_s('fp32') / 1e9:.0f} GFLOP/s, copy "
        f"{spec.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s, call "
        f"{spec.efficiency.kernel_latency_s * 1e6:.1f} us"
    )
    print(
        "| case | predicted step | measured step (spread) | step error | per-op median |"
        " ops matched |"
    )
    print("|---|---|---|---|---|---|")
    for label, model, inputs, training in cases():
        r = dlperf.measure(
            model, inputs, device="cpu", precision="fp32", training=training, steps=3
        )
        matched = [o for o in r.ops if o["measured_time_s"]]
        errors = [
            abs(o["predicted_time_s"] - o["measured_time_s"]) / o["measured_time_s"]
            for o in matched
        ]
        per_op = statistics.median(errors) if errors else float("nan")
        print(
            f"| {label} | {r.predicted_time_s * 1e3:.1f} ms | {r.measured_time_s * 1e3:.1f} ms"
            f" ({r.measured_spread_s * 1e3:.1f}) | {r.error:+.0%} | {per_op:.0%} | "
            f"{len(matched)}/{len(r.ops)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
