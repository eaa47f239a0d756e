"""vLLM serving under load against measured runs (`../shared/data/serving_rate/cases.json`).

Every case is one latency of a measured vLLM v0.15.1 serving benchmark
(inference-perf, streaming completions, `ignore_eos`, H100 SXM; 25 runs, 448
cases: run x stage x metric; see the data's README.md), predicted the way a
user would ask: `dlperf.simulate(model, RunConfig.build(...))` through the
public API, each run replayed as it ran.

How each published field becomes a dlperf option:

- `model` (layers, hidden, heads, kv_heads, head_dim, ffn, vocab, MoE) -> a
  config string with meta tensors: dense Llama-family checkpoints (Llama-2,
  Llama-3.1, CodeLlama, Yi) `hf:llama:layers=L,hidden=H,heads=A,kv_heads=K,
  mlp=F,vocab=V,positions=4096`; Qwen2.5 `hf:qwen2:...` (the same short keys,
  biased QKV); Mistral-Nemo `hf:mistral:...,head_dim=128` (its heads are not
  hidden / heads wide); Mixtral `hf:mixtral:...,num_local_experts=E,
  num_experts_per_tok=K` (the expert FFN as mlp). `positions` is the runs'
  max_model_len, 4096. Llama-4 Scout `hf:llama4_text:...,intermediate_size=
  EXPERT_FFN,intermediate_size_mlp=DENSE_FFN,num_local_experts=16,
  num_experts_per_tok=1` (every layer MoE beside its shared expert; its
  chunked attention over 8192 tokens is whole attention at 4096), in `fp8`
  (its FP8-dynamic checkpoint).
- `model.checkpoint_torch_dtype` -> `precision` (bfloat16: bf16, float16:
  fp16; vLLM's dtype "auto" is the checkpoint's); `hardware.gpu` -> "h100".
- `vllm` -> `tp` (tensor_parallel_size), `max_num_batched_tokens`,
  `max_num_seqs`, `gpu_memory_utilization` (0.9 where unstated: vLLM's
  default), `block_size`, `max_model_len`; `cuda_graphs=True` and
  `chunked_prefill=True`, as vLLM v1 runs. Prefix caching is the workload's
  (below). `cpu_offload` is not said (the sources disagree what it was).
- `workload.data.shared_prefix` -> `dataset="shared-prefix:system=S,
  question=Q,output=O,groups=G,users=U,extra=E"`: G = num_unique_system_prompts,
  U = num_users_per_system_prompt; E = the chat template's extra prompt tokens:
  the whole run's measured mean prompt length minus S + Q where
  `raw_inference_perf` has it, else 30 (the README's 25-40), marked `E~`.
- `workload.definition.stages` -> `stages="RATExSECONDS,..."` (each stage
  issues int(rate x duration) requests, gaps exponential, as inference-perf's
  constant load). A stage whose duration is not published (the "-lite"
  workloads) is given 600 s, marked `dur~`; a stage whose rate is not
  published (general-lite's first stage) cannot be replayed: the runs's later
  stages are replayed alone and the unknown stage's cases and the whole-run
  cases are skipped with that reason. `--prompts-scale F` issues a fraction F
  of each stage's requests over the same fraction of its duration (quick runs;
  1.0 for the results: a saturated stage's backlog grows with its duration, so
  a fraction understates it).

Predicted metrics: each stage's report (stage -1: the whole run) gives TTFT
and E2E mean, P90 and P99. `itl_mean` is defined by the data as (mean E2E -
mean TTFT) / (mean output_len - 1) with inference-perf's measured output
length, and is predicted the same way from the predicted means, dividing by
the stage's measured mean output length where `raw_inference_perf` gives it
(Llama-2-7B's re-tokenized outputs read 15-25% short) and by O - 1 elsewhere.
A run is predicted to saturate when an offered stage rate is above the
report's `sustainable_rate`.

Statuses: by default the normal runs (trainval, raw_extra). `--status` picks
others: raw_extra_overloaded and superseded_overloaded lost requests to
timeouts (their latencies cover successes only), dp_excluded ran data
parallel 2 with expert parallelism (dlperf's serving has no DP/EP: replayed
at tp alone). Each status is summarised on its own, and trainval and
raw_extra together as `normal`.

Nothing here is fitted: the GPU's constants come from the kernel data
(bench/calibrate.py), the engine's host costs from the framework file.

Run: python bench/serving_rate.py [--markdown] [--only SUBSTRING]
     [--prompts-scale F] [--status trainval,raw_extra|all]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

DATA = Path(os.environ.get("DLPERF_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CASES = DATA / "serving_rate" / "cases.json"

METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "itl_mean")
NORMAL = ("trainval", "raw_extra")
STATUSES = (*NORMAL, "raw_extra_overloaded", "superseded_overloaded", "dp_excluded")
POSITIONS = 4096  # the runs' max_model_len
DEFAULT_EXTRA = 30  # chat-template tokens where no measured prompt length is published
DEFAULT_DURATION = 600.0  # seconds, for a stage whose duration is not published
PRECISION = {"bfloat16": "bf16", "float16": "fp16"}
# RedHat's FP8-dynamic checkpoints: e4m3 weights, activations quantized per token as
# they run: vLLM's fp8 GEMMs and fp8 fused MoE (dlperf's `fp8`)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Skip(Exception):
    """A run or case that cannot be said to dlperf, and why."""


def model_name(run: dict) -> str:
    """The config string of a run's model (Skip when it has none)."""
    m, hf = run["model"], run["model_hf_id"].lower()
    head_dim = m.get("head_dim") or m["hidden"] // m["heads"]
    keys = f"layers={m['layers']},hidden={m['hidden']},heads={m['heads']},kv_heads={m['kv_heads']},"
    moe = m.get("moe")
    if "llama-4" in hf:  # every layer MoE (top-1 of 16) beside a shared expert of the same size
        if m.get("interleave_moe_layer_step") != 1 or not m.get("shared_expert"):
            raise Skip(f"Llama-4 {run['model_hf_id']}: only Scout's layout is said here")
        return (
            f"hf:llama4_text:{keys}head_dim={head_dim},intermediate_size={moe['expert_ffn']},"
            f"intermediate_size_mlp={m['dense_ffn_if_any']},num_local_experts={moe['num_experts']},"
            f"num_experts_per_tok={moe['top_k']},vocab={m['vocab']},positions={POSITIONS}"
        )
    if moe:
        if "mixtral" not in hf:
            raise Skip(f"MoE {run['model_hf_id']} has no config string")
        return (
            f"hf:mixtral:{keys}mlp={moe['expert_ffn']},vocab={m['vocab']},positions={POSITIONS},"
            f"num_local_experts={moe['num_experts']},num_experts_per_tok={moe['top_k']}"
        )
    family = "qwen2" if "qwen" in hf else "mistral" if "mistral" in hf else "llama"
    name = f"hf:{family}:{keys}mlp={m['ffn']},vocab={m['vocab']},positions={POSITIONS}"
    if head_dim * m["heads"] != m["hidden"]:
        name += f",head_dim={head_dim}"
    return name


def precision_of(run: dict) -> str:
    dtype = run["model"]["checkpoint_torch_dtype"]
    if dtype.startswith("fp8-dynamic"):
        return "fp8"
    if dtype not in PRECISION:
        raise Skip(f"checkpoint dtype {dtype!r} is not bf16/fp16")
    return PRECISION[dtype]


def raw_stage(run: dict, stage: int) -> dict | None:
    raw = run.get("raw_inference_perf") or {}
    return raw.get(str(stage))


def workload_of(run: dict) -> dict:
    """The shared-prefix lengths: system, question, output, groups, users,
    extra (and whether extra was measured)."""
    sp = run["workload"]["definition"]["data"]["shared_prefix"]
    s, q, o = sp["system_prompt_len"], sp["question_len"], sp["output_len"]
    whole = raw_stage(run, -1)
    if whole and whole.get("prompt_len", {}).get("mean"):
        extra, measured = max(0, round(whole["prompt_len"]["mean"] - s - q)), True
    else:
        extra, measured = DEFAULT_EXTRA, False
    return {
        "system": s, "question": q, "output": o,
        "groups": sp["num_unique_system_prompts"], "users": sp["num_users_per_system_prompt"],
        "extra": extra, "extra_measured": measured,
    }  # fmt: skip


def stages_of(run: dict, scale: float) -> tuple[list[dict], list[str]]:
    """The stages to replay ({index, rate, duration}) and the notes on what
    was assumed or left out."""
    notes, stages, unknown = [], [], []
    for i, st in enumerate(run["workload"]["definition"]["stages"]):
        if st.get("rate_rps") is None:
            unknown.append(i)
            continue
        duration = st.get("duration_s")
        if duration is None:
            duration = DEFAULT_DURATION
            notes.append(f"dur~ stage {i}: duration not published, {DEFAULT_DURATION:g} s assumed")
        stages.append({"index": i, "rate": float(st["rate_rps"]), "duration": duration * scale})
    if unknown:
        notes.append(f"stage {unknown} rate not published: those stages and the whole run skipped")
    return stages, notes


def engine_options(run: dict) -> dict:
    v = run["vllm"]
    return {
        "gpu": "h100",
        "precision": precision_of(run),
        "tp": int(v["tensor_parallel_size"]),
        "max_num_batched_tokens": int(v["max_num_batched_tokens"]),
        "max_num_seqs": int(v["max_num_seqs"]),
        "gpu_memory_utilization": float(v.get("gpu_memory_utilization") or 0.9),
        "block_size": int(v.get("block_size") or 16),
        "max_model_len": int(v.get("max_model_len") or POSITIONS),
        "cuda_graphs": True,
        "chunked_prefill": True,
    }


def _ms(stats: dict, key: str) -> float | None:
    value = (stats or {}).get(key)
    return None if value is None else value * 1e3


def _metrics(ttft: dict, e2e: dict, out_len: float) -> dict:
    got = {f"ttft_{k}": _ms(ttft, k) for k in ("mean", "p90", "p99")}
    got.update({f"e2e_{k}": _ms(e2e, k) for k in ("mean", "p90", "p99")})
    if got["e2e_mean"] is not None and got["ttft_mean"] is not None and out_len > 1:
        got["itl_mean"] = (got["e2e_mean"] - got["ttft_mean"]) / (out_len - 1)
    return got


def out_len_for(run: dict, stage: int, w: dict) -> float:
    raw = raw_stage(run, stage)
    mean = (raw or {}).get("output_len", {}).get("mean")
    return float(mean) if mean else float(w["output"])


def predict(run: dict, name: str, w: dict, stages: list[dict]) -> tuple[dict, dict]:
    """{stage index: predicted metrics} and facts ({sustainable_rate, saturated})
    from one simulation of the run's stages."""
    import dlperf

    dataset = (
        f"shared-prefix:system={w['system']},question={w['question']},output={w['output']},"
        f"groups={w['groups']},users={w['users']},extra={w['extra']}"
    )
    spec = ",".join(f"{s['rate']:g}x{s['duration']:g}" for s in stages)
    config = dlperf.RunConfig.build(dataset=dataset, stages=spec, **engine_options(run))
    report = dlperf.simulate(name, config=config).to_dict()
    out = {}
    for got, st in zip(report["stages"], stages, strict=True):
        out[st["index"]] = _metrics(got["ttft"], got["e2e"], out_len_for(run, st["index"], w))
    if len(stages) == len(run["workload"]["definition"]["stages"]):
        out[-1] = _metrics(report["ttft"], report["e2e"], out_len_for(run, -1, w))
    facts = {"sustainable_rate": report.get("sustainable_rate"),
             "saturated": report.get("saturated")}  # fmt: skip
    return out, facts


def replay(run: dict, scale: float) -> dict:
    """A run's translation and its predictions (or why it was skipped)."""
    result = {"key": run["key"], "status": run["status"], "notes": [], "pred": {}}
    try:
        name = model_name(run)
        w = workload_of(run)
        stages, notes = stages_of(run, scale)
        result.update(model=name, w=w, stages=stages, tp=run["vllm"]["tensor_parallel_size"])
        result["notes"] += notes
        if not w["extra_measured"]:
            result["notes"].append(f"E~ extra={DEFAULT_EXTRA} assumed (no measured prompt lengths)")
        if run["status"] == "dp_excluded":
            result["notes"].append("ran DP2+EP; replayed at tp alone")
        if not stages:
            raise Skip("no stage has a published rate")
        result["pred"], facts = predict(run, name, w, stages)
        result.update(facts)
    except Skip as why:
        result["skip"] = str(why)
    except Exception as err:  # a dlperf refusal: reported, the bench goes on
        result["skip"] = f"dlperf: {type(err).__name__}: {err}"
    return result


def short(key: str) -> str:
    return key.split(":", 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--only", help="runs whose key contains this text")
    parser.add_argument(
        "--prompts-scale",
        type=float,
        default=1.0,
        help="simulate this fraction of each stage's requests (quick runs)",
    )
    parser.add_argument(
        "--status",
        default=",".join(NORMAL),
        help=f"comma-separated statuses, or 'all' ({', '.join(STATUSES)})",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

    data = json.loads(CASES.read_text())
    wanted = STATUSES if args.status == "all" else tuple(args.status.split(","))
    runs = data["experiments"]
    left = sorted({r["status"] for r in runs.values()} - set(wanted))
    for status in left:
        n = sum(r["status"] == status for r in runs.values())
        print(f"skipped {n} runs with status {status} (pass --status {status} to replay them)")
    keys = [k for k, r in runs.items() if r["status"] in wanted]
    if args.only:
        keys = [k for k in keys if args.only in k]
    print(f"prompts scale {args.prompts_scale:g} (1: every request each stage sent)")

    cases = {}
    for c in data["cases"]:
        cases.setdefault(c["experiment_key"], []).append(c)
    started = time.time()
    results = []
    for i, key in enumerate(keys):
        log(f"[{i + 1}/{len(keys)}] {short(key)} ...")
        t0 = time.time()
        results.append(replay(runs[key], args.prompts_scale))
        r = results[-1]
        log(f"    {'skipped: ' + r['skip'] if 'skip' in r else 'done'} ({time.time() - t0:.0f} s)")
    report(results, cases, args.markdown)
    print(f"\n{len(results)} runs in {time.time() - started:.0f} s")


def report(results: list[dict], cases: dict, markdown: bool) -> None:
    rows, errors = [], {}
    for r in results:
        for c in cases[r["key"]]:
            got = r["pred"].get(c["stage_index"], {}).get(c["metric"])
            measured = c["published"]["value"]
            error = None if got is None else got / measured - 1
            if error is not None:
                for group in {r["status"], "normal" if r["status"] in NORMAL else r["status"]}:
                    errors.setdefault(group, {}).setdefault(c["metric"], []).append(error)
            rows.append((r, c, got, measured, error))

    print("\n## Per run (predicted / measured ms, error)\n")
    for r in results:
        if "skip" in r:
            print(f"- {short(r['key'])} ({r['status']}): skipped: {r['skip']}")
    by_stage = {}
    for r, c, got, measured, error in rows:
        if "skip" not in r:
            by_stage.setdefault((r["key"], c["stage_index"]), {})[c["metric"]] = (got, measured,
                                                                                 error)  # fmt: skip
    head = ["run", "model", "tp", "stage", "rate", *METRICS]
    if markdown:
        print("\n| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print("\n" + "  ".join(head))
    for r in results:
        if "skip" in r:
            continue
        rates = {s["index"]: s["rate"] for s in r["stages"]}
        for (key, stage), got in by_stage.items():
            if key != r["key"]:
                continue
            rate = f"{rates[stage]:g}" if stage in rates else "all" if stage == -1 else "?"
            cells = []
            for metric in METRICS:
                p, m, e = got.get(metric, (None, None, None))
                cells.append("-" if m is None else f"{m:.0f} n/a" if p is None
                             else f"{p:.0f}/{m:.0f} {e:+.0%}")  # fmt: skip
            model = r["model"].split(":")[1] + ":" + r["model"].split("layers=")[1].split(",")[0]
            line = [short(key), model, str(r["tp"]), str(stage), rate, *cells]
            print(("| " + " | ".join(line) + " |") if markdown else "  ".join(line))
    for r in results:
        for note in r.get("notes", []):
            print(f"  note {short(r['key'])}: {note}")

    print("\n## Saturation (offered rate above dlperf's sustainable rate)\n")
    for r in results:
        if "skip" in r:
            continue
        sus = r.get("sustainable_rate")
        offered = ", ".join(f"{s['rate']:g}" for s in r["stages"])
        verdict = "SATURATES" if r.get("saturated") else "keeps up"
        sus_text = "?" if sus is None else f"{sus:.2f}/s"
        print(f"- {short(r['key'])} ({r['status']}): offered {offered}/s, sustainable "
              f"{sus_text}: {verdict}")  # fmt: skip

    print("\n## Summary per metric\n")
    head = ["status", "metric", "cases", "median |err|", "within 15%", "within 25%"]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for status in [s for s in (*STATUSES, "normal") if s in errors]:
        by_metric = errors[status]
        for metric in METRICS:
            errs = by_metric.get(metric, [])
            if not errs:
                continue
            absolute = [abs(e) for e in errs]
            cells = [status, metric, str(len(errs)), f"{statistics.median(absolute):.1%}",
                     f"{sum(a <= 0.15 for a in absolute) / len(errs):.0%}",
                     f"{sum(a <= 0.25 for a in absolute) / len(errs):.0%}"]  # fmt: skip
            print(("| " + " | ".join(cells) + " |") if markdown else
                  f"{status:22s} {metric:10s} cases {len(errs):3d}  median |err| {cells[3]:>6s}  "
                  f"within 15% {cells[4]:>4s}  within 25% {cells[5]:>4s}")  # fmt: skip
    missing = sum(1 for row in rows if row[4] is None)
    print(f"\n{len(rows) - missing} cases predicted, {missing} not (skipped runs or stages)")


if __name__ == "__main__":
    main()
