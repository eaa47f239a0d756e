"""Hopper GEMMs: the fit on ../shared/data/xla_h100, its leave-one-out errors,
and the ceiling of every catalogue GPU.

1. Error of the bundled Hopper constants on the 750 XLA H100 GEMMs, per group
   (dtype x op), by problem size, and over all rows (target: median <= 8%).
2. Leave one out: the Hopper constants refitted (bench/calibrate.fit_family)
   without one kind of row, then judged on it: without the batched GEMMs,
   without the plain ones, without the largest problems (>= 30 GFLOP), without
   the smallest (< 1 GFLOP). Across architectures: the H100 rows priced with
   Ampere's constants (what dlperf did before it had Hopper's), and the A100
   trace and LLMCompass rows priced with Hopper's.
3. Ceiling: the fastest predicted 16-bit GEMM of every catalogue GPU over sizes
   1024-32768, against its `tensor_ceiling_efficiency` x peak.

Run: python bench/hopper_gemm.py [--skip-loo]   (the refits take a few minutes)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from accuracy import ape, predict_group  # noqa: E402
from calibrate import fit_family  # noqa: E402
from dlperf.hardware import gpu, gpus  # noqa: E402
from dlperf.hardware.spec import Efficiency, _architecture_defaults  # noqa: E402
from dlperf.kernels.gemm_tiles import predict_many  # noqa: E402
from sources import Group, load_csv_groups, load_trace_groups  # noqa: E402

TARGET = 0.08
LARGE_FLOPS, SMALL_FLOPS = 30e9, 1e9


def _flops(g: Group) -> np.ndarray:
    return 2.0 * g.b * g.m * g.n * g.k


def _take(g: Group, keep: np.ndarray) -> Group:
    fields = {f.name: getattr(g, f.name) for f in dataclasses.fields(g)}
    for name in ("b", "m", "n", "k", "time_s"):
        fields[name] = fields[name][keep]
    return Group(**fields)


def _errors(groups: list[Group], efficiency: dict | None = None) -> np.ndarray:
    out = []
    for g in groups:
        spec = gpu(g.gpu)
        if efficiency:
            spec = dataclasses.replace(
                spec, efficiency=dataclasses.replace(spec.efficiency, **efficiency)
            )
        out.append(ape(predict_group(g, spec)["model"], g.time_s))
    return np.concatenate(out)


def current(groups: list[Group]) -> None:
    print("| group | rows | median | p90 | < 1 GFLOP | 1-30 GFLOP | >= 30 GFLOP |")
    print("|---|---|---|---|---|---|---|")
    for g in groups:
        err = _errors([g])
        flops = _flops(g)
        buckets = [
            np.median(err[s]) if s.any() else float("nan")
            for s in (flops < SMALL_FLOPS, (flops >= SMALL_FLOPS) & (flops < LARGE_FLOPS),
                      flops >= LARGE_FLOPS)
        ]  # fmt: skip
        print(
            f"| {g.key} | {len(g)} | {np.median(err):.1%} | {np.percentile(err, 90):.1%} | "
            + " | ".join(f"{b:.1%}" for b in buckets)
            + " |"
        )
    every = _errors(groups)
    verdict = "met" if np.median(every) <= TARGET else "MISSED"
    median = np.median(every)
    print(f"\nall {len(every)} rows: median {median:.1%} (target <= {TARGET:.0%}: {verdict})")


def _split(groups, name):
    """(fit on, judge on) for one leave-out."""
    if name in ("bmm", "gemm"):
        return [g for g in groups if g.op != name], [g for g in groups if g.op == name]
    large = name == "large"
    fit, judge = [], []
    for g in groups:
        big = _flops(g) >= (LARGE_FLOPS if large else SMALL_FLOPS)
        held = big if large else ~big
        fit.append(_take(g, ~held))
        judge.append(_take(g, held))
    return fit, judge


def _loo_job(job):
    name, fit_on, start = job
    values, _, _ = fit_family("hopper", fit_on, start)
    return name, values


def leave_one_out(groups: list[Group]) -> None:
    defaults = _architecture_defaults()
    start = {**defaults["default"], **defaults["hopper"]}
    splits = {name: _split(groups, name) for name in ("bmm", "gemm", "large", "small")}
    jobs = [(name, fit_on, start) for name, (fit_on, _) in splits.items()]
    with ProcessPoolExecutor(max_workers=2) as pool:
        fitted = dict(pool.map(_loo_job, jobs))
    print("| left out | rows | median error, fitted without them | with the bundled fit |")
    print("|---|---|---|---|")
    for name, (_, judge) in splits.items():
        held = _errors(judge, fitted[name])
        print(f"| {name} | {len(held)} | {np.median(held):.1%} | {np.median(_errors(judge)):.1%} |")


def _family_constants(family: str) -> dict:
    """A family's efficiency constants, less its GEMM ceiling (each device keeps its own)."""
    table = {**_architecture_defaults()["default"], **_architecture_defaults()[family]}
    names = set(Efficiency.field_names()) - {"tensor_ceiling_efficiency"}
    return {k: float(v) for k, v in table.items() if k in names}


def across_architectures(groups: list[Group]) -> None:
    """Each family's constants on the other's rows."""
    print("| rows | with the other family's constants | with their own |")
    print("|---|---|---|")
    h100 = np.median(_errors(groups, _family_constants("ampere")))
    print(f"| H100 (xla_h100) with Ampere's | {h100:.1%} | {np.median(_errors(groups)):.1%} |")
    a100 = [g for g in load_trace_groups() + load_csv_groups("llmcompass") if len(g) >= 20]
    theirs = np.median(_errors(a100, _family_constants("hopper")))
    own = np.median(_errors(a100))
    print(f"| A100 (trace, LLMCompass) with Hopper's | {theirs:.1%} | {own:.1%} |")


def ceilings() -> None:
    sizes = np.array([1024, 2048, 4096, 8192, 16384, 32768])
    m, n, k = (a.ravel() for a in np.meshgrid(sizes, sizes, sizes))
    print("| GPU | ceiling TFLOP/s | fastest predicted TFLOP/s | share of ceiling |")
    print("|---|---|---|---|")
    for spec in gpus():
        dtype = next((d for d in ("bf16", "fp16") if spec.has_dtype(d)), None)
        if dtype is None or not spec.uses_tensor_cores(dtype):
            continue
        price = predict_many(m, n, k, np.ones_like(m), spec, dtype)
        fastest = float((2.0 * m * n * k / price.time_s).max())
        ceiling = spec.peak_flops_per_s(dtype) * spec.efficiency.tensor_ceiling_efficiency
        ceiling *= spec.sustained_clock_fraction(True)
        print(
            f"| {spec.id} | {ceiling / 1e12:.0f} | {fastest / 1e12:.0f} | {fastest / ceiling:.3f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-loo", action="store_true", help="no refits")
    args = parser.parse_args()
    groups = load_csv_groups("xla")
    print("### Bundled Hopper constants on xla_h100\n")
    current(groups)
    if not args.skip_loo:
        print("\n### Leave one out\n")
        leave_one_out(groups)
    print("\n### Across architectures\n")
    across_architectures(groups)
    print("\n### Ceilings\n")
    ceilings()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
