"""LLM inference against published runs (`../shared/data/e2e/published_inference.csv`).

Every row is FasterTransformer's end-to-end latency of a static batch (the
context phase, then the generation steps with a KV cache; GPT 345M to
Megatron-530B on A100-80GB, fp16, tensor parallel up to 32, pipeline up to
3), predicted the way a user would ask: `dlperf serve` through the public API.

How a published model is written in dlperf's terms: FasterTransformer's GPT
is a GPT-2-shaped decoder (learned positions, pre-LayerNorm, a 4x GELU MLP,
an LM head tied to the embedding), so each row's sizes become
`hf:gpt2:n_embd=H,n_layer=L,n_head=A,n_inner=F,vocab_size=V,n_positions=P`
(meta tensors, no weights), with P the larger of 2048 and the request's
tokens. Each model is built once and its traces shared between rows (one
`Session`); `dlperf serve` traces three of its layers and repeats the middle
one (steps.py), so Megatron-530B's 105 layers trace as fast as GPT-2's.
FasterTransformer's GPT computes attention unfused (`--attention math`): its
context phase runs Q K^T and P V as cuBLAS batched GEMMs around a masked
softmax kernel over the S x S scores, and its generation steps read the KV
cache in a masked attention kernel (memory-bound either way).

Nothing here is fitted: the GPU's constants come from the kernel data
(bench/calibrate.py), NCCL's from its own cost model, the engine's host
costs from the framework file.

Run: python bench/serve_e2e.py [--markdown] [--only MODEL_SUBSTRING] [--limit N]
     [--attention auto|math|...]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

DATA = Path(os.environ.get("DLPERF_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CSV = DATA / "e2e" / "published_inference.csv"


def model_name(row: dict) -> str:
    positions = max(2048, int(row["input_len"]) + int(row["output_len"]))
    return (
        f"hf:gpt2:n_embd={row['hidden']},n_layer={row['layers']},n_head={row['heads']},"
        f"n_inner={row['ffn']},vocab_size={row['vocab']},n_positions={positions}"
    )


def size_of(row: dict) -> str:
    return row["model"].split(" of ")[-1].strip()


def predict(row: dict, models: dict, session, attention: str = "auto") -> float:
    """The predicted e2e latency in ms of one published row."""
    from dlperf.models import load_model
    from dlperf.serving import serve

    name = model_name(row)
    if name not in models:
        models[name] = load_model(name, batch=1, seq_len=1)
    report = serve(
        models[name],
        gpu=row["gpu"],
        precision=row["precision"],
        kv_cache_dtype=row["kv_cache_dtype"],
        input_len=int(row["input_len"]),
        output_len=int(row["output_len"]),
        batch=int(row["batch_size"]),
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        must_fit=False,
        session=session,
        attention=attention,
    )
    return report.latency_s * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--only", help="rows whose model contains this text")
    parser.add_argument("--limit", type=int, help="at most this many rows")
    parser.add_argument(
        "--attention", default="math", help="dlperf serve's --attention (FasterTransformer: math)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from dlperf.run import Session

    with open(CSV) as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "e2e_latency_ms"]
    if args.only:
        rows = [r for r in rows if args.only in r["model"]]
    rows = rows[: args.limit] if args.limit else rows
    models, session = {}, Session()
    errors = defaultdict(list)
    started = time.time()
    if args.markdown:
        print("| row | published ms | predicted ms | error |")
        print("|---|---|---|---|")
    for row in rows:
        predicted = predict(row, models, session, args.attention)
        published = float(row["value"])
        error = predicted / published - 1
        errors[size_of(row)].append(error)
        if args.markdown:
            print(f"| {row['id']} | {published:.1f} | {predicted:.1f} | {error:+.0%} |")
        else:
            print(
                f"{row['id']:32s} published {published:9.1f} ms  "
                f"predicted {predicted:9.1f} ms  {error:+6.1%}"
            )
    print()
    print(f"{len(rows)} rows in {time.time() - started:.0f} s")
    every = [e for errs in errors.values() for e in errs]
    for size, errs in [*errors.items(), ("all", every)]:
        absolute = [abs(e) for e in errs]
        worst = max(errs, key=abs)
        print(
            f"{size:18s} rows {len(errs):3d}  median |err| {statistics.median(absolute):6.1%}  "
            f"mean err {statistics.mean(errs):+6.1%}  worst {worst:+6.1%}"
        )


if __name__ == "__main__":
    main()
