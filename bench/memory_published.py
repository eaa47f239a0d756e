"""Predicted peak training memory against published measurements.

Source: Hugging Face Transformers documentation, "Efficient Training on a
Single GPU" (perf_train_gpu_one, v4.27, 2023): bert-large-uncased with a
sequence-classification head, sequences of 512 tokens, the Trainer's AdamW
unless stated, on a Tesla V100-SXM2-16GB; "GPU memory occupied" is NVML's
used memory (MiB) after training, so it includes the CUDA context and the
caching allocator's reserve. The same page reports 2631 MiB after loading
the model (1343 MiB of it the CUDA context and kernels).

Run: python bench/memory_published.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

import dlperf  # noqa: E402
from dlperf.models import build_without_weights  # noqa: E402
from dlperf.training_memory import CUDA_CONTEXT_BYTES  # noqa: E402

# The page's own measurement of the CUDA context with PyTorch's kernels loaded
# (CUDA 11.2, before lazy module loading): the run's `--cuda-context`.
MEASURED_CONTEXT_MIB = 1343

# (label, batch, accumulate, checkpoint, precision, optimizer, measured MiB)
PUBLISHED = [
    ("batch 4", 4, 1, "none", "fp32", "adamw", 14949),
    ("batch 1 x 4 accumulation", 4, 4, "none", "fp32", "adamw", 8681),
    ("+ gradient checkpointing", 4, 4, "blocks", "fp32", "adamw", 6775),
    ("batch 4, fp16", 4, 1, "none", "amp-fp16", "adamw", 13939),
    ("1 x 4, checkpointing, fp16", 4, 4, "blocks", "amp-fp16", "adamw", 7275),
    ("batch 4, Adafactor", 4, 1, "none", "fp32", "adafactor", 12295),
    ("1 x 4, checkpointing, fp16, Adafactor", 4, 4, "blocks", "amp-fp16", "adafactor", 4847),
    ("batch 4, 8-bit Adam", 4, 1, "none", "fp32", "adam8bit", 13085),
    ("1 x 4, checkpointing, fp16, 8-bit Adam", 4, 4, "blocks", "amp-fp16", "adam8bit", 5363),
]


def bert_large():
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    config._attn_implementation = "eager"  # v4.27 had no SDPA path for BERT
    return build_without_weights(transformers.BertForSequenceClassification, config)


def main() -> int:
    start = time.perf_counter()
    model = bert_large()
    rows, errors, adjusted_errors = [], [], []
    for label, batch, accumulate, checkpoint, precision, optimizer, measured in PUBLISHED:
        ids = torch.zeros(batch, 512, dtype=torch.long, device="meta")
        labels = torch.zeros(batch, dtype=torch.long, device="meta")
        run = dict(precision=precision, optimizer=optimizer, checkpoint=checkpoint)
        inputs = {"input_ids": ids, "labels": labels}
        r = dlperf.memory(model, inputs, gpu="v100-sxm2-16gb", accumulate=accumulate, **run)
        predicted = r.peak_bytes / 2**20
        error = (predicted - measured) / measured
        errors.append(abs(error))
        # The same run with that machine's measured context (`--cuda-context 1343`)
        theirs = dlperf.gpu("v100-sxm2-16gb", cuda_context_mib=MEASURED_CONTEXT_MIB)
        r = dlperf.memory(model, inputs, gpu=theirs, accumulate=accumulate, **run)
        adjusted = r.peak_bytes / 2**20
        adjusted_error = (adjusted - measured) / measured
        adjusted_errors.append(abs(adjusted_error))
        rows.append(
            f"| {label} | {measured} | {predicted:,.0f} | {error:+.1%} | "
            f"{adjusted:,.0f} | {adjusted_error:+.1%} |"
        )
    print(f"{time.strftime('%Y-%m-%d')}: bert-large-uncased, seq 512, V100-SXM2-16GB")
    print(
        "| configuration | measured MiB | predicted peak MiB | error | with `--cuda-context "
        f"{MEASURED_CONTEXT_MIB}` | error |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\nmedian absolute error {statistics.median(errors):.1%} (target <= 10%); with the "
        f"run's own {MEASURED_CONTEXT_MIB} MiB CUDA context (`--cuda-context`) instead of "
        f"dlperf's default {CUDA_CONTEXT_BYTES / 2**20:.0f} MiB: "
        f"{statistics.median(adjusted_errors):.1%}; {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
