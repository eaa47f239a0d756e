"""NVIDIA's published pre-training throughput against dlperf's plans
(`../shared/data/nvidia_training/cases.json`, issue 35).

Every development row of the Megatron-Bridge performance summary (NeMo
containers 25.09 to 26.08 on DGX-H100, DGX-B200 and GB200 NVL72; see the
data's README.md and `meta.fields`) is priced as it ran, through the public
API: one `dlperf.plan` with every dimension forced to the row's, and its
predicted tokens/s per GPU compared with the published figure. Nothing is
fitted: the GPUs' constants are the catalogue's.

How each published field becomes a dlperf option:

- `model` (layers, hidden, heads, kv_heads, ffn, vocab) -> a config string
  with meta tensors: dense Llama 3 / 3.1 `hf:llama:layers=L,hidden=H,
  heads=A,kv_heads=K,mlp=F,vocab=V,positions=S`; Qwen3 MoE `hf:qwen3_moe`
  with `experts, top_k, expert_mlp` and the published head_dim; GPT-OSS
  `hf:gpt_oss` (head_dim 64, experts of FFN size `expert_ffn`); DeepSeek-V3
  `hf:deepseek_v3` (its own MLA sizes: the transformers defaults are
  DeepSeek-V3's). `positions` is the row's sequence length.
- `gpu` -> the catalogue's h100-sxm5-80gb, b200-sxm-180gb and
  gb200-nvl72-186gb (its 72-GPU NVLink domain comes with the spec);
  `gpus_per_node` as published (8; 4 for a GB200 compute tray).
- `precision` -> bf16: `amp-bf16` (Megatron's bf16 weights with fp32 main
  weights and gradients); fp8 (FP8 current scaling): `fp8`; MXFP8 and
  NVFP4: `mxfp8` and `nvfp4` (Transformer Engine's block-scaled recipes).
- `parallel` -> `dp, tp, pp, cp, ep` as published; `vp` -> `schedule
  interleaved:VP` (1F1B without it; none without pipelining);
  `sequence_parallel` where published and tp > 1; sharding `zero1` (the
  perf recipes' distributed optimizer) or `fsdp` where the row ran
  Megatron FSDP; `micro_batch`, `global_batch` as published.
- the step: `attention cudnn` (Transformer Engine's cuDNN fused
  attention), `kernels te` (what Megatron-Core with Transformer Engine's
  fused norms, SwiGLU and fp8 linear layers save for backward), `loss
  fused` (Megatron-Bridge's models set cross_entropy_loss_fusion: the
  loss's gradient is written in place of the bf16 logits, no fp32 copy),
  `clip_grad` (Megatron clips at 1.0), `cuda_graphs` where the recipe
  sets `cuda_graph_impl` (transformer_engine, local or full_iteration)
  or `cuda_graphs: true`, with `cuda_graph_scope` the recipe's modules
  where Transformer Engine's graphs hold only some (attn, moe_router,
  moe_preprocess: the experts are then issued by the host); `checkpoint none` unless the
  recipe recomputes: `recompute_modules` is dlperf's `selective:A+B` over
  the modules it prices (core_attn, mla_up_proj, mlp, layernorm); the
  others (moe_act, moe, shared_experts) and a block recompute of the first
  K layers (`recompute_num_layers`) have no dlperf option: the row is priced
  without them and its remark says so (memory then overcounts them). CPU
  activation offloading (`cpu_offloading_num_layers`) is `offload_layers`,
  the experts' all-to-all overlap (`moe_a2a_overlap`) `overlap_ep_comm`,
  the flex dispatcher (`moe_token_dispatcher_type: flex`, or a DeepEP or
  HybridEP `moe_flex_dispatcher_backend`) `moe_dispatcher flex`.

A row dlperf cannot say (no architecture in the data, a precision it has
not, a model its tracer refuses) is listed as skipped with the reason and
counted; a plan judged not to fit is priced all the same and counted as
"does not fit" (NVIDIA ran every row).

Run: python bench/nvidia_training.py [--markdown] [--only SUBSTRING]
     [--limit N] [--commands]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DATA = Path(os.environ.get("DLPERF_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CASES = DATA / "nvidia_training" / "cases.json"

GPUS = {"h100-sxm5-80gb": "h100-sxm5-80gb", "b200-sxm-180gb": "b200-sxm-180gb",
        "gb200": "gb200-nvl72-186gb"}  # fmt: skip
SHORT = {"h100-sxm5-80gb": "H100", "b200-sxm-180gb": "B200", "gb200": "GB200"}
PRECISIONS = {"bf16": "amp-bf16", "fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
CUDA_GRAPHS = ("transformer_engine", "local", "full_iteration")
WITHIN = 0.10


class Skip(Exception):
    """A row dlperf cannot say yet; the message is the reason."""


@dataclass
class Case:
    row: dict
    model: str
    options: dict  # run and plan options as `dlperf.plan` takes them
    remarks: list[str]

    @property
    def command(self) -> str:
        parts = [f"dlperf plan {self.model}"]
        for key, value in self.options.items():
            if value in (None, False):
                continue
            flag = "--" + key.replace("_", "-")
            parts.append(flag if value is True else f"{flag} {value}")
        return " ".join(parts)


def _model(row: dict) -> str:
    m = row["model"]
    if not m:
        raise Skip("no architecture in the data (hybrid Mamba or unpublished)")
    seq = row["seq_len"]
    size = (f"layers={m['layers']},hidden={m['hidden']},heads={m['heads']},"
            f"kv_heads={m['kv_heads']},vocab={m['vocab']},positions={seq}")  # fmt: skip
    moe, key = m.get("moe"), row["model_key"]
    if not moe:
        return f"hf:llama:{size},mlp={m['ffn']}"
    experts = f"experts={moe['num_experts']},top_k={moe['top_k']}"
    head_dim = f"head_dim={m.get('head_dim')}"
    if key.startswith("qwen3"):
        return f"hf:qwen3_moe:{size},{experts},expert_mlp={moe['expert_ffn']},{head_dim}"
    if key.startswith("gpt_oss"):
        return f"hf:gpt_oss:{size},{experts},mlp={moe['expert_ffn']},{head_dim}"
    if key.startswith("deepseek_v3"):
        dense = moe.get("dense_layers", 0)
        return (f"hf:deepseek_v3:{size},{experts},expert_mlp={moe['expert_ffn']},"
                f"mlp={m['ffn']},first_k_dense_replace={dense}")  # fmt: skip
    raise Skip(f"no dlperf model for {key}")


# Megatron-Bridge perf helpers a recipe calls (`recipe.settings.helper_calls`)
# and the settings dlperf reads that they apply, as their source sets them
# (perf_recipes: qwen and deepseek_v3 helpers); applied after the recipe's own.
_FULL_ITERATION_HYBRIDEP = {
    "cuda_graph_impl": "full_iteration", "cuda_graph_scope": [],
    "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
    "moe_a2a_overlap": True,
}  # fmt: skip
HELPERS = {
    "_enable_hybridep_full_iteration_mxfp8": _FULL_ITERATION_HYBRIDEP,
    "_enable_deepseek_full_iteration_mxfp8": _FULL_ITERATION_HYBRIDEP,
}


def recipe_settings(row: dict) -> dict:
    """The row's recipe settings with those of the helpers it calls laid over them."""
    settings = dict((row.get("recipe") or {}).get("settings") or {})
    for helper in settings.get("helper_calls") or []:
        settings.update(HELPERS.get(helper, {}))
    return settings


def _step(row: dict, remarks: list[str]) -> dict:
    """cuda graphs and the recompute policy of the row's recipe."""
    from dlperf.checkpointing import RECOMPUTE_MODULES
    from dlperf.run_config import CUDA_GRAPH_SCOPES
    settings = recipe_settings(row)
    graphs = settings.get("cuda_graph_impl") in CUDA_GRAPHS or settings.get("cuda_graphs") is True
    modules = settings.get("recompute_modules") or []
    checkpoint = "none"
    priced = [m for m in modules if m in RECOMPUTE_MODULES]
    if priced:
        checkpoint = "selective:" + "+".join(priced)
    if len(priced) < len(modules):
        left = [m for m in modules if m not in priced]
        remarks.append(f"recompute {'+'.join(left)} not priced")
    if settings.get("recompute_granularity") == "full":
        checkpoint = "full"
    elif settings.get("recompute_num_layers"):
        remarks.append(f"block recompute of {settings['recompute_num_layers']} layers not priced")
    offload = settings.get("cpu_offloading_num_layers") or None
    overlap = any(settings.get(k) for k in ("moe_a2a_overlap", "overlap_moe_expert_parallel_comm"))
    flex = (settings.get("moe_token_dispatcher_type") == "flex"
            or settings.get("moe_flex_dispatcher_backend") in ("deepep", "hybridep"))  # fmt: skip
    scope = [m for m in settings.get("cuda_graph_scope") or [] if m in CUDA_GRAPH_SCOPES]
    partial = graphs and settings.get("cuda_graph_impl") == "transformer_engine" and scope
    return {"cuda_graphs": graphs, "checkpoint": checkpoint, "offload_layers": offload,
            "overlap_ep_comm": overlap, "moe_dispatcher": "flex" if flex else None,
            "cuda_graph_scope": "+".join(scope) if partial else None}  # fmt: skip


def case_of(row: dict) -> Case:
    precision = PRECISIONS.get(row["precision"])
    if precision is None:
        raise Skip(f"no dlperf precision {row['precision']}")
    model, remarks = _model(row), []
    p = row["parallel"]
    tp, pp, cp, vp, ep = p["tp"], p["pp"], p["cp"], p.get("vp"), p.get("ep") or 1
    options = {
        "gpu": GPUS[row["gpu"]],
        "precision": precision,
        "attention": "cudnn",
        "kernels": "te",
        "loss": "fused",
        "clip_grad": True,
        "seq_len": row["seq_len"],
        "gpus": row["n_gpus"],
        "gpus_per_node": row["gpus_per_node"],
        "global_batch": row["global_batch"],
        "micro_batch": row["micro_batch"],
        "dp": row["n_gpus"] // (tp * pp * cp),
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "sharding": "fsdp" if p.get("fsdp") else "zero1",
        "sequence_parallel": bool(p.get("sequence_parallel")) and tp > 1,
        **_step(row, remarks),
    }
    if ep > 1:
        options["ep"] = ep
    if pp > 1:
        options["schedule"] = f"interleaved:{vp}" if vp and vp > 1 else "1f1b"
    return Case(row, model, options, remarks)


@dataclass
class Result:
    row: dict
    published: float
    predicted: float = float("nan")
    fits: bool = True
    memory_gib: float = float("nan")
    skipped: str = ""  # the reason a row is not priced
    remark: str = ""
    command: str = ""

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def group(self) -> tuple[str, str, str]:
        moe = "MoE" if "moe" in self.row["flags"] else "dense"
        return SHORT[self.row["gpu"]], self.row["precision"], moe


def predict(row: dict, session) -> Result:
    import dlperf
    from dlperf.errors import DlperfError

    published = float(row["published"]["value"])
    try:
        case = case_of(row)
    except Skip as why:
        return Result(row, published, skipped=str(why))
    options = dict(case.options)
    try:
        report = dlperf.plan(case.model, batch=case.options["micro_batch"], session=session,
                             **options)  # fmt: skip
    except DlperfError as err:
        return Result(row, published, skipped=f"dlperf refuses: {err}", command=case.command)
    plan = report.plans[0]
    remark = "; ".join(case.remarks)
    return Result(row, published, plan.tokens_per_s_per_gpu, plan.fits,
                  plan.memory_per_gpu_bytes / 2**30, remark=remark,
                  command=case.command)  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--only", default="", help="rows whose id contains this")
    parser.add_argument("--limit", type=int, default=0, help="the first N rows (after --only)")
    parser.add_argument("--commands", action="store_true", help="print each row's command")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from dlperf.run import Session

    rows = [r for r in json.loads(CASES.read_text())["cases"] if args.only in r["id"]]
    if args.limit:
        rows = rows[: args.limit]
    session, results = Session(), []
    start = time.perf_counter()
    for row in rows:
        t = time.perf_counter()
        result = predict(row, session)
        results.append(result)
        said = result.skipped[:60] if result.skipped else f"{result.predicted:,.0f}"
        print(f"  {row['id']}: {said} vs {result.published:,.0f} "
              f"({time.perf_counter() - t:.0f} s)", file=sys.stderr)  # fmt: skip
    _print(results, args.markdown, args.commands)
    print(f"\n{len(rows)} rows in {time.perf_counter() - start:.0f} s")
    return 0


def _table(bar: str, markdown: bool, header: list[str]) -> None:
    print(f"{bar} " + f" {bar} ".join(header) + f" {bar}")
    if markdown:
        print("|" + "---|" * len(header))


def _print(results: list[Result], markdown: bool, commands: bool) -> None:
    bar = "|" if markdown else " "
    priced = [r for r in results if not r.skipped]
    _table(bar, markdown, ["id", "published", "dlperf", "error", "fits", "remark"])
    for r in priced:
        fit = "yes" if r.fits else f"no ({r.memory_gib:.0f} GiB)"
        print(f"{bar} {r.row['id'][3:]} {bar} {r.published:,.0f} {bar} {r.predicted:,.0f} {bar} "
              f"{r.error:+.1%} {bar} {fit} {bar} {r.remark} {bar}")  # fmt: skip
        if commands:
            print(f"      {r.command}")
    print()
    groups: dict[tuple, list[Result]] = {}
    for r in priced:
        groups.setdefault(r.group, []).append(r)
    kinds = {"dense": [r for r in priced if r.group[2] == "dense"],
             "MoE": [r for r in priced if r.group[2] == "MoE"]}  # fmt: skip
    for name, members in kinds.items():
        if members:
            groups[("all", "all", name)] = members
    if all(kinds.values()):
        groups[("all", "all", "all")] = priced
    _table(bar, markdown, ["GPU", "precision", "kind", "rows", "median abs error",
                           "median error", f"within {WITHIN:.0%}", "does not fit"])  # fmt: skip
    for (gpu, precision, kind), members in groups.items():
        errors = [r.error for r in members]
        within = sum(abs(e) <= WITHIN for e in errors)
        unfit = sum(not r.fits for r in members)
        print(f"{bar} {gpu} {bar} {precision} {bar} {kind} {bar} {len(members)} {bar} "
              f"{statistics.median(abs(e) for e in errors):.1%} {bar} "
              f"{statistics.median(errors):+.1%} {bar} {within}/{len(members)} "
              f"({within / len(members):.0%}) {bar} {unfit} {bar}")  # fmt: skip
    unfit = [r for r in priced if not r.fits]
    if unfit:
        print(f"\njudged not to fit ({len(unfit)} of {len(priced)} priced rows, all of which ran):")
        for r in unfit:
            print(f"  {r.row['id'][3:]}: {r.memory_gib:.1f} GiB per GPU" +
                  (f" ({r.remark})" if r.remark else ""))  # fmt: skip
    skipped = [r for r in results if r.skipped]
    if skipped:
        reasons: dict[str, list[str]] = {}
        for r in skipped:
            reasons.setdefault(_reason(r.skipped), []).append(r.row["id"][3:])
        print(f"\nskipped ({len(skipped)} of {len(results)} rows):")
        for reason, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(ids)}: {reason}")
            if len(ids) <= 4:
                print(f"      {', '.join(ids)}")


def _reason(text: str) -> str:
    """A skip reason shortened to its first clause (refusals' messages run long)."""
    first = text.split("\n")[0]
    return first if len(first) <= 160 else first[:157] + "..."


if __name__ == "__main__":
    sys.exit(main())
