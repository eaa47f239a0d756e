"""Speed and memory of `dlperf analyze` on large models, CLI start included.

Runs each command in a fresh process, timing the wall clock and reading the
child's peak resident memory. For comparison, PyTorch's FlopCounterMode on
real CPU tensors (same model, where it fits in this machine's memory).

Run: python bench/speed.py
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

LLAMA_7B = "hf:llama:layers=32,hidden=4096,heads=32,mlp=11008,vocab=32000"
CASES = [
    (
        "analyze",
        "7B decoder, seq 2048, batch 8, amp-bf16, h100",
        10.0,
        2.0,
        [
            LLAMA_7B,
            "--seq-len",
            "2048",
            "--batch",
            "8",
            "--gpu",
            "h100",
            "--precision",
            "amp-bf16",
            "--train",
        ],
    ),
    (
        "analyze",
        "ResNet-50, batch 256, amp-fp16, a100",
        3.0,
        None,
        [
            "torchvision:resnet50",
            "--batch",
            "256",
            "--gpu",
            "a100",
            "--precision",
            "amp-fp16",
            "--train",
        ],
    ),
    (
        "plan",
        "70B decoder (llama-70b), seq 2048, 64 x h100",
        30.0,
        None,
        [
            "hf:llama-70b",
            "--seq-len",
            "2048",
            "--gpu",
            "h100",
            "--gpus",
            "64",
            "--precision",
            "amp-bf16",
        ],
    ),
]


def run_cli(argv: list[str], verb: str = "analyze") -> tuple[float, float]:
    """(wall seconds, peak RSS in GB) of `dlperf VERB ARGV --json` in a new process."""
    cmd = [sys.executable, "-m", "dlperf", verb, *argv, "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 2**20  # kilobytes on Linux


def in_process(name: str, **kwargs) -> float:
    import dlperf

    dlperf.analyze(name, **kwargs)  # warm: imports and first-call setup
    start = time.perf_counter()
    dlperf.analyze(name, **kwargs)
    return time.perf_counter() - start


def flop_counter_resnet50(batch: int) -> float:
    """Seconds for FlopCounterMode over a real fwd+bwd of ResNet-50 on this CPU."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    model = torchvision.models.resnet50()
    x = torch.randn(batch, 3, 224, 224)
    start = time.perf_counter()
    with FlopCounterMode(display=False):
        model(x).sum().backward()
    return time.perf_counter() - start


def main() -> int:
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {platform.processor() or 'cpu'}")
    print("| case | wall s (target) | peak RSS GB (target) |")
    print("|---|---|---|")
    for verb, label, wall_target, rss_target, argv in CASES:
        wall, rss = run_cli(argv, verb)
        rss_text = f"{rss:.2f}" + (f" (< {rss_target})" if rss_target else "")
        print(f"| `dlperf {verb}` {label} | {wall:.1f} (< {wall_target}) | {rss_text} |")
    warm = in_process("torchvision:resnet50", batch=256, gpu="a100", precision="amp-fp16")
    print(f"| ResNet-50 b256 inside Python, imports done | {warm:.2f} (< 3.0) | |")
    batch = 16  # batch 256 of real activations does not fit in 24 GB
    real = flop_counter_resnet50(batch)
    ours = in_process("torchvision:resnet50", batch=batch, gpu="a100", precision="fp32")
    print(f"| FlopCounterMode, real CPU tensors, ResNet-50 b{batch} fwd+bwd | {real:.1f} | |")
    print(f"| dlperf.analyze, same model and batch | {ours:.2f} (x{real / ours:.0f} faster) | |")
    print("| FlopCounterMode on the 7B decoder | does not fit: 27 GB of fp32 weights | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
