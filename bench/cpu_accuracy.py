"""Predicted vs measured on this machine's CPU, with its probed spec.

Targets: whole step within 20%, per-op median absolute error within 30%.
Run: python bench/cpu_accuracy.py [--cached]

The CPU is probed afresh first (unless --cached), so that the spec and the
measurements come from the same minutes of a machine whose speed drifts. The
probe fits everything it needs on its own micro-benchmarks (square matmuls, a
streaming add, a tiny eager training step, two convolutions): none of the
models below is used for fitting, they are held out. Run it on an otherwise
idle machine: the load average is printed before and after.
"""

from __future__ import annotations

import os
import statistics
import sys
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
    small = "hf:llama:layers=2,hidden=256,heads=4,mlp=688,vocab=8000"
    loaded = dlperf.models.load_model(small, batch=4, seq_len=128)
    yield "small Llama (2 x 256), seq 128, b4, training step", loaded.module, loaded.inputs, True


def main() -> int:
    from dlperf.hardware.cpu import cpu_spec

    load_before = os.getloadavg()[0]
    spec = cpu_spec(refresh="--cached" not in sys.argv[1:])
    eff = spec.efficiency
    print(
        f"{time.strftime('%Y-%m-%d')}: {spec.name}; fp32 matmul "
        f"{spec.peak_flops_per_s('fp32') / 1e9:.0f} GFLOP/s, streaming add "
        f"{spec.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s (x{eff.llc_streaming_speedup:.1f} "
        f"in the {spec.l2_cache_bytes / 2**20:.0f} MiB cache), call "
        f"{eff.kernel_latency_s * 1e6:.1f} us, eager step "
        f"{eff.eager_call_overhead_s * 1e6:.1f} us per op, convolution knee "
        f"{eff.conv_reduction_knee:.0f}"
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
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
