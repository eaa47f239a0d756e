"""Whole training steps against published runs (`../shared/data/e2e/published_training.csv`).

Every row is predicted the way a user would ask dlperf: the published
configuration written as dlperf's options (printed as the equivalent command
line), through the public API. Throughput rows compare samples/s or
tokens/s/GPU; memory rows compare `dlperf memory`'s peak with NVML's figure.

- single-GPU rows: `dlperf analyze` of one micro-batch step; a step of
  gradient accumulation is `grad_accum` forward-backward passes and one
  optimizer step, timed apart (`Session.analysis(..., with_optimizer=False)`).
- multi-GPU rows: `dlperf plan` forced to the published dp/tp/pp and sharding,
  and searched around it: whether dlperf judges the published plan to fit,
  and where its own best plan ranks it (`e2e_plan.py`).

How each published model is written in dlperf's terms:

- MPT (llm-foundry) is a GPT-2-shaped decoder (learned positions, LayerNorm,
  4x GELU MLP, tied head), so it is `hf:gpt2` sized as MPT with vocab 50368,
  MPT's exact GELU (GPT-2's default is the tanh form) and no dropout (MPT's
  defaults), attention by flash-attn 1.x's CUDA kernels (`--attention flash1`:
  see below), and `--precision bf16` for FSDP's PURE mode (bf16
  parameters, gradients and layer norms; an fp32 master shard), with
  llm-foundry's default loss, flash-attn's fused cross-entropy (bf16 logits,
  no fp32 log-softmax: `--loss fused`): the model file `bench/mpt.py`.
  The tables ran FlashAttention-1, not the FlashAttention-2 that `auto` picks
  today: the README they come from still says "Update tables with torch 2.0
  after next Composer release" (torch 1.13, whose llm-foundry installed
  flash-attn 1.x; its setup.py keeps a `gpu-flash2` extra "for backwards
  compatibility" since), and the rows themselves say so. MPT-1b reports MFU
  56.2% at 2048 tokens and 55.3% at 8192, where the attention FLOPs the MFU
  counts (every score, as if unmasked) grow from 13% to 38% of the total.
  Per token at peak, the step grows by (7.97e9 + 4.83e9) / 0.5529 - (7.90e9 +
  1.21e9) / 0.5623 = 6.97e9 FLOP-times; the kernels compute 0.583 of the
  counted attention FLOPs (half the scores under the causal mask; the
  backward recomputes the forward's scores: 3.5 / 3), so 0.583 x (4.83e9 -
  1.21e9) = 2.11e9 more FLOPs ran at 2.11 / 6.97 = 30% of peak: FA1's 25-40%
  (the FA2 paper's figure), not FA2's 50-73%. The benchmark script
  (scripts/train/benchmarking/submit_benchmarks.py) ran the image
  mosaicml/pytorch:1.13.1_cu117 (`--torch-version 1.13`) with the yamls'
  gradient clipping (`--clip-grad`); one version of it defaults to
  `attn_impl: triton`, where the rows say flash: dlperf's `triton` prices the
  same rows within 3 points of `flash1` (125m +16.8% against +14.6%).
- ResNet-50 v1.5 is torchvision's resnet50 (stride 2 in the 3x3 conv); its AMP
  runs are channels-last (`--channels-last`), as the recipe's configs.yml
  sets `memory_format: nhwc` for DGX-1V AMP (FP32 keeps NCHW).
- BERT-large ran Hugging Face's eager attention in 2023 (`--attention eager`),
  under the Trainer, which clips the gradients' norm every step by default
  (`--clip-grad`), on a PyTorch that loaded every CUDA kernel up front
  (`--torch-version 1.12 --cuda-context 1343`: see `case_of`).

Run: python bench/e2e.py [--markdown] [--only ID_PREFIX]
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(os.environ.get("DLPERF_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CSV = DATA / "e2e" / "published_training.csv"


@dataclass
class Case:
    """One published row as dlperf's options."""

    row: dict
    model: str
    options: dict  # run options: gpu, precision, optimizer, checkpoint, attention ...
    batch: int
    seq_len: int | None
    # how the run's machine differs from dlperf's defaults (`dlperf.gpu`'s settings)
    device: dict = field(default_factory=dict)

    @property
    def run_options(self) -> dict:
        """The options as the API takes them: --gpu configured by the device settings."""
        if not self.device:
            return self.options
        import dlperf

        return {**self.options, "gpu": dlperf.gpu(self.options["gpu"], **self.device)}

    @property
    def command(self) -> str:
        gpus = int(self.row["gpus"])
        verb = "plan" if gpus > 1 else ("memory" if self.is_memory else "analyze")
        parts = [f"dlperf {verb} {self.model}"]
        flags = {**self.options, **{k.removesuffix("_mib"): v for k, v in self.device.items()}}
        for key, value in flags.items():
            if value in (None, False, "none", "auto", "eager"):
                continue
            flag = "--" + key.replace("_", "-")
            parts.append(flag if value is True else f"{flag} {value}")
        parts.append(f"--batch {self.batch}")
        if self.seq_len:
            parts.append(f"--seq-len {self.seq_len}")
        if gpus > 1:
            parts.append(f"--gpus {gpus} --gpus-per-node {self.row['gpus_per_node']}")
            parts.append(f"--global-batch {self.row['global_batch']}")
            parts.append(self.parallel_flags)
        accum = int(self.row["grad_accum"])
        if self.is_memory and accum > 1:
            parts.append(f"--accumulate {accum}")
        return " ".join(parts)

    @property
    def is_memory(self) -> bool:
        return self.row["metric"].endswith("memory_mb")

    @property
    def parallel(self) -> dict:
        sharding = {"FULL_SHARD": "fsdp", "none": "none"}.get(self.row["sharding"], "none")
        r = self.row
        return {"dp": int(r["dp"]), "tp": int(r["tp"]), "pp": int(r["pp"]), "sharding": sharding}

    @property
    def parallel_flags(self) -> str:
        return " ".join(f"--{k} {v}" for k, v in self.parallel.items())


# perf_train_gpu_one's own measurement of the CUDA context and PyTorch's kernels
HF_CUDA_CONTEXT_MIB = 1343

_PRECISION = {"fp32": "fp32", "amp (fp16)": "amp-fp16", "fp16=true": "amp-fp16"}


def _precision(text: str) -> str:
    low = text.lower()
    if low.startswith("bf16 with fsdp"):
        return "bf16"
    for key, name in _PRECISION.items():
        if low.startswith(key):
            return name
    raise ValueError(f"no dlperf precision for {text!r}")


def _mpt_model(description: str, seq_len: int) -> str:
    """MPT as `bench/mpt.py` builds it (GPT-2's blocks with llm-foundry's fused
    cross-entropy), one factory per published size."""
    size = re.match(r"MPT-(\w+)", description).group(1)
    suffix = "" if seq_len == 2048 else f"_s{seq_len}"
    path = Path(__file__).with_name("mpt.py")
    if path.is_relative_to(Path.cwd()):  # the command line as typed from the checkout
        path = path.relative_to(Path.cwd())
    return f"{path}:mpt_{size}{suffix}"


def case_of(row: dict) -> Case:
    description = row["model"]
    options = {
        "gpu": row["gpu"],
        "precision": _precision(row["precision"]),
        "optimizer": row["optimizer"],
        "checkpoint": "full" if row["activation_checkpointing"] != "none" else "none",
    }
    seq_len = int(row["seq_len"]) if row["seq_len"] else None
    device = {}
    if description.startswith("MPT"):
        model = _mpt_model(description, seq_len)
        options["loss"] = "fused"  # llm-foundry's default: flash-attn's cross-entropy
        options["attention"] = "flash1"  # the tables' flash-attn 1.x (see the docstring)
        # the benchmark script's image, mosaicml/pytorch:1.13.1_cu117, and the yamls'
        # algorithms.gradient_clipping (Composer clips the norm at 1.0)
        device = {"torch_version": "1.13"}
        options["clip_grad"] = True
        options["reduce_dtype"] = "bf16"  # FSDP's PURE mixed precision reduces in bf16
    elif description.startswith("ResNet-50"):
        model, seq_len = "torchvision:resnet50", None
        if options["precision"] != "fp32":
            # configs.yml of the recipe: DGX1V AMP runs `memory_format: nhwc`
            options["channels_last"] = True
    elif description.startswith("bert-large"):
        model = "hf:bert-large-uncased:head=sequence-classification,num_labels=2"
        options["attention"] = "eager"  # Hugging Face BERT had no SDPA path then
        # The page measured its CUDA context with PyTorch's kernels loaded: 1343 MB in
        # nvidia-smi after its first CUDA tensor (CUDA 11.2, before lazy module loading),
        # where dlperf's default is a lazily loaded context's 500 MiB. PyTorch loads
        # lazily by default from 1.13 (pytorch/pytorch#86509): the run's was 1.12 or
        # older, whose clip_grad_norm_ loops over the gradients one op at a time.
        device = {"cuda_context_mib": HF_CUDA_CONTEXT_MIB, "torch_version": "1.12"}
        options["clip_grad"] = True  # the Trainer's max_grad_norm=1.0 default
        if options["optimizer"] == "adamw":  # the Trainer's adamw_hf: a loop over the tensors
            options["optimizer"] = "adamw-hf"
    else:
        raise ValueError(f"no dlperf model for {description!r}")
    micro = int(row["micro_batch"])
    return Case(row, model, options, micro, seq_len, device)


# -- predictions -------------------------------------------------------------

PLAN_CHECKS: list = []  # the multi-GPU rows' plan checks, for the summary


def _single_gpu_rate(case: Case, session) -> float:
    """Samples per second of one GPU: accum x (forward + backward) + one optimizer step."""
    from dlperf.run import resolve

    run = resolve(case.model, batch=case.batch, seq_len=case.seq_len, **case.run_options)
    whole = session.analysis(run)
    passes = session.analysis(run, with_optimizer=False)
    optimizer_s = whole.step_time_s - passes.step_time_s
    accum = int(case.row["grad_accum"])
    return case.batch * accum / (accum * passes.step_time_s + optimizer_s)


def _plan_rate(case: Case, session):
    """The forced published plan priced and ranked among dlperf's (`e2e_plan.py`)."""
    from e2e_plan import check_plan

    return check_plan(case, session)


def predict(case: Case, session) -> tuple[float, str]:
    """dlperf's figure in the row's metric, and a remark."""
    import dlperf

    row = case.row
    if case.is_memory:
        r = dlperf.memory(
            case.model,
            batch=int(row["global_batch"]),
            seq_len=case.seq_len,
            accumulate=int(row["grad_accum"]),
            session=session,
            **case.run_options,
        )
        return r.peak_bytes / 2**20, ""
    gpus = int(row["gpus"])
    if gpus > 1:
        check = _plan_rate(case, session)
        PLAN_CHECKS.append(check)
        samples_per_s, remark = check.samples_per_s, check.remark
    else:
        samples_per_s, remark = _single_gpu_rate(case, session), ""
    if row["metric"] == "tokens_per_s_per_gpu":
        return samples_per_s * case.seq_len / gpus, remark
    return samples_per_s, remark


# -- the table ---------------------------------------------------------------


def _source(row: dict) -> str:
    return row["source"].split(":")[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--only", default="", help="rows whose id starts with this")
    parser.add_argument("--commands", action="store_true", help="print each row's command")
    args = parser.parse_args(argv)
    from dlperf.errors import DlperfError
    from dlperf.run import Session

    with open(CSV, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith(args.only)]
    session = Session()
    results = []
    start = time.perf_counter()
    for row in rows:
        case = case_of(row)
        published = float(row["value"])
        try:
            predicted, remark = predict(case, session)
            error = (predicted - published) / published
        except DlperfError as err:
            predicted, error, remark = float("nan"), float("nan"), f"refused: {err}"
        results.append((row, case, published, predicted, error, remark))
        print(f"  {row['id']}: {predicted:,.1f} vs {published:,.1f}", file=sys.stderr)
    _print(results, args.markdown, args.commands)
    if PLAN_CHECKS:
        from e2e_plan import summary

        print(f"\n{summary(PLAN_CHECKS)}")
    print(f"\n{len(rows)} rows in {time.perf_counter() - start:.0f} s")
    return 0


def _print(results, markdown: bool, commands: bool) -> None:
    bar = "|" if markdown else " "
    print(f"{bar} id {bar} metric {bar} published {bar} dlperf {bar} error {bar} remark {bar}")
    if markdown:
        print("|---|---|---|---|---|---|")
    for row, case, published, predicted, error, remark in results:
        print(
            f"{bar} {row['id']} {bar} {row['metric']} {bar} {published:,.1f} {bar} "
            f"{predicted:,.1f} {bar} {error:+.1%} {bar} {remark} {bar}"
        )
        if commands:
            print(f"      {case.command}")
    print()
    groups: dict[tuple[str, str], list[float]] = {}
    for row, case, _, _, error, _ in results:
        kind = "memory" if case.is_memory else "throughput"
        groups.setdefault((_source(row), kind), []).append(error)
    print(f"{bar} source {bar} kind {bar} rows {bar} median abs error {bar} worst {bar}")
    if markdown:
        print("|---|---|---|---|---|")
    for (source, kind), errors in groups.items():
        finite = [abs(e) for e in errors if e == e]
        failed = len(errors) - len(finite)
        median = statistics.median(finite) if finite else float("nan")
        worst = max(finite) if finite else float("nan")
        note = f" ({failed} refused)" if failed else ""
        print(
            f"{bar} {source} {bar} {kind} {bar} {len(errors)}{note} {bar} {median:.1%} {bar} "
            f"{worst:.1%} {bar}"
        )


if __name__ == "__main__":
    sys.exit(main())
