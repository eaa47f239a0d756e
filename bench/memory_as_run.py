"""Issue 23's memory items, each as a what-if on one model (`bench/RESULTS.md`).

- the caching allocator's reserve beyond the live tensors (replayed), per
  loss: GPT-2 (124M) at batch 8 x 1024 under amp-bf16 on an A100;
- the loss as the trainer runs it (`--loss eager|fused|chunked`): MPT-125m at
  llm-foundry's published micro-batch 26 x 2048 in bf16 on an A100-40GB,
  Llama-3-8B-sized at 2 x 8192;
- what a compiled step saves: GPT-2-medium's blocks at batch 8 x 1024;
- FSDP's mixed precision (the compute dtype, no autocast) against DDP's
  autocast: activations per GPU of a Llama block stack on 8 H100s.

Run: python bench/memory_as_run.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import dlperf  # noqa: E402
from dlperf.errors import DlperfError  # noqa: E402

GiB = 2**30
MPT = str(Path(__file__).with_name("mpt.py")) + ":mpt_125m"
LLAMA = "hf:llama:hidden_size=4096,intermediate_size=14336,num_attention_heads=32,"
LLAMA += "num_key_value_heads=8,vocab_size=128256,num_hidden_layers=4"


def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def allocator_and_losses() -> None:
    print("| model | loss | activations GiB | allocated GiB | reserved GiB | peak GiB |")
    print("|---|---|---|---|---|---|")
    cases = [
        ("hf:gpt2", dict(gpu="a100", batch=8, seq_len=1024, precision="amp-bf16")),
        (MPT, dict(gpu="a100-sxm4-40gb", batch=26, precision="bf16")),
        (LLAMA, dict(gpu="h100", batch=2, seq_len=8192, precision="amp-bf16")),
    ]
    for model, options in cases:
        name = Path(model).name if model.endswith("125m") else model.split(":")[1][:24]
        for loss in ("eager", "fused", "chunked"):
            try:
                r = dlperf.memory(model, loss=loss, **options)
            except DlperfError as err:  # a model file without a Hugging Face head
                print(f"| {name} | {loss} | refused: {err} | | | |")
                continue
            print(
                f"| {name} | {loss} | {_gib(r.activations_bytes)} | {_gib(r.allocated_bytes)} "
                f"| {_gib(r.reserved_bytes)} | {_gib(r.peak_bytes)} |"
            )


def compiled() -> None:
    options = dict(gpu="a100", batch=8, seq_len=1024, precision="amp-bf16")
    eager = dlperf.memory("hf:gpt2-medium", **options)
    fused = dlperf.memory("hf:gpt2-medium", compile=True, **options)
    per_block = [r.by_module["transformer.h"] / 24 / 2**20 for r in (eager, fused)]
    print(
        f"\nGPT-2-medium, batch 8 x 1024, amp-bf16: saved per block {per_block[0]:.0f} MiB eager, "
        f"{per_block[1]:.0f} MiB compiled; peak {_gib(eager.peak_bytes)} -> "
        f"{_gib(fused.peak_bytes)} GiB"
    )


def fsdp_compute_dtype() -> None:
    common = dict(gpu="h100", gpus=8, micro_batch=1, seq_len=8192, dp=8, tp=1, pp=1)
    common.update(checkpoint="none", precision="amp-bf16")
    fsdp = dlperf.plan(LLAMA, sharding="fsdp", **common).best.memory
    ddp = dlperf.plan(LLAMA, sharding="none", **common).best.memory
    more = ddp.activations_bytes / fsdp.activations_bytes - 1
    print(
        f"\nLlama-3-8B-sized (4 blocks), 1 x 8192, amp-bf16, 8 H100: activations per GPU "
        f"{_gib(ddp.activations_bytes)} GiB under DDP's autocast, {_gib(fsdp.activations_bytes)} "
        f"GiB under FSDP's mixed precision (autocast's fp32 tensors: +{more:.0%})"
    )


def main() -> int:
    start = time.perf_counter()
    print(f"{time.strftime('%Y-%m-%d')}: dlperf's predictions (no GPU)\n")
    allocator_and_losses()
    compiled()
    fsdp_compute_dtype()
    print(f"\n{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
