"""Fit the GEMM model's named efficiency constants per architecture family.

Only the measured data in ../shared/data is used (see bench/sources.py). For
each family with measurements, the constants are chosen to minimise the mean,
over that family's groups (source x GPU x dtype x op), of the median absolute
percentage error; every group weighs the same whatever its row count. Devices
without measurements (Ada, Hopper, Blackwell) take the constants of the
nearest measured family, stated in `_architectures.toml`.

Run: python bench/calibrate.py [--write]   (about a minute on two cores)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).parent))

from scipy.optimize import minimize_scalar  # noqa: E402

from accuracy import ape, host_bound_s, predict_group  # noqa: E402
from dlperf.hardware import gpu  # noqa: E402
from dlperf.hardware.spec import ARCHITECTURES_FILE, _architecture_defaults  # noqa: E402
from dlperf.kernels.fixed_costs import streaming_latency_s  # noqa: E402
from dlperf.kernels.gemm_tiles import predict_many  # noqa: E402
from dlperf.kernels.roofline import streaming_time_s  # noqa: E402
from dlperf.ops import CostContext, cost_of, norm  # noqa: E402
from dlperf.precision import precision  # noqa: E402
from memory_ops import load_groups as load_memory_groups  # noqa: E402
from memory_ops import trace_shapes  # noqa: E402
from sources import Group, load_gemm_groups  # noqa: E402

ROWS_PER_GROUP = 2500
RESTARTS = 3
LOW_POWER_WATTS = 75.0
# Families whose element-wise kernels ../shared/data measures (fit_memory).
STREAMING_MEASURED = {"pascal", "volta", "turing", "ampere"}
# GEMM constants every family fits, with the bounds that keep them physical.
BOUNDS = {
    # no kernel streams HBM/GDDR faster than about 92% of the datasheet rate
    "dram_efficiency": (0.4, 0.92),
    "simt_math_efficiency": (0.3, 1.1),
    "tensor_math_efficiency": (0.3, 1.0),
    "tile_reuse_knee": (0.5, 64.0),
    "tf32_tile_reuse_knee": (0.5, 256.0),
    "serial_store_share": (0.0, 1.0),
    "later_wave_fixed_share": (0.0, 1.0),
    "tile_fixed_cycles": (50.0, 20000.0),
    "kernel_latency_s": (1e-6, 2e-5),
    "sm_bandwidth_share": (1.0, 16.0),
    "misaligned_tensor_efficiency": (0.1, 1.0),
    "simt_watts_per_core_ghz": (0.002, 0.2),
    "batched_min_tile_area": (256.0, 32768.0),
    "tensor_watts_per_sm_ghz": (0.1, 10.0),
}
# Power constants start where a limit would bite only on low-TDP cards.
POWER_START = {
    "simt_watts_per_core_ghz": 0.02,
    "tensor_watts_per_sm_ghz": 1.0,
    "tf32_tile_reuse_knee": 16.0,
    "serial_store_share": 0.5,
}
# Families with no GEMM measurements here take the kernel constants of the
# family whose kernels they run: Ada's Tensor Cores take Ampere's mma.sync
# instructions (the same CUTLASS/cuBLAS kernel families, 128-byte alignment);
# Blackwell's are programmed through the same TMA-fed asynchronous pipelines as
# Hopper's wgmma kernels. Each keeps its own datasheet facts and its own
# `tensor_ceiling_efficiency` (see `_architectures.toml`).
INHERIT = {"ada": "ampere", "blackwell": "hopper"}


def _subsample(group: Group, rng) -> Group:
    if len(group) <= ROWS_PER_GROUP:
        return group
    pick = np.sort(rng.choice(len(group), ROWS_PER_GROUP, replace=False))
    fields = {f.name: getattr(group, f.name) for f in dataclasses.fields(group)}
    for name in ("b", "m", "n", "k", "time_s"):
        fields[name] = fields[name][pick]
    return Group(**fields)


def _free_names(groups: list[Group]) -> list[str]:
    tensor = any(gpu(g.gpu).uses_tensor_cores(g.math_dtype) for g in groups)
    simt = any(not gpu(g.gpu).uses_tensor_cores(g.math_dtype) for g in groups)
    names = [
        "dram_efficiency",
        "tile_reuse_knee",
        "tile_fixed_cycles",
        "kernel_latency_s",
        "serial_store_share",
        "later_wave_fixed_share",
    ]
    # The memory-bound kernels' fill of the memory system shares this constant: where
    # they have measurements (and their fit), the GEMM fit leaves it alone.
    if not {gpu(g.gpu).architecture for g in groups} & STREAMING_MEASURED:
        names.append("sm_bandwidth_share")
    if any((g.b > 1).any() for g in groups):
        names.append("batched_min_tile_area")
    # The linear power demand is seen only where a card cannot hold its datasheet
    # clock: the 70-75 W parts (T4, P4). Elsewhere the family keeps its value.
    low_power = any((gpu(g.gpu).tdp_watts or 1e9) <= LOW_POWER_WATTS for g in groups)
    if simt:
        names.append("simt_math_efficiency")
        if low_power:
            names.append("simt_watts_per_core_ghz")
    if any(g.math_dtype == "tf32" for g in groups):
        names.append("tf32_tile_reuse_knee")
    if tensor:
        names.append("tensor_math_efficiency")
        if low_power:
            names.append("tensor_watts_per_sm_ghz")
        if any(((g.n % 8) | (g.k % 8)).any() for g in groups):  # rows that miss alignment
            names.append("misaligned_tensor_efficiency")
    return names


def _objective(x, names, groups, specs):
    values = {n: float(np.clip(np.exp(v), *BOUNDS[n])) for n, v in zip(names, x, strict=True)}
    medians = []
    for g in groups:
        base = specs[g.gpu]
        spec = dataclasses.replace(base, efficiency=dataclasses.replace(base.efficiency, **values))
        pred = predict_group(g, spec)["model"]
        medians.append(np.median(ape(pred, g.time_s)))
    return float(np.mean(medians))


def fit_family(family: str, groups: list[Group], start: dict) -> tuple[dict, float, float]:
    rng = np.random.default_rng(0)
    groups = [_subsample(g, rng) for g in groups]
    specs = {g.gpu: gpu(g.gpu) for g in groups}
    names = _free_names(groups)
    x0 = np.log([start[n] if start[n] > 0 else POWER_START[n] for n in names])
    # Steps of ~35% in every constant, so Nelder-Mead explores beyond the start.
    before = _objective(x0, names, groups, specs)
    # Nelder-Mead stalls in a dozen dimensions: restart it from its own best point.
    x = x0
    for _ in range(RESTARTS):
        simplex = np.vstack([x] + [x + 0.3 * np.eye(len(names))[i] for i in range(len(names))])
        best = minimize(
            _objective,
            x,
            args=(names, groups, specs),
            method="Nelder-Mead",
            options={"maxiter": 800, "xatol": 1e-3, "fatol": 1e-4, "initial_simplex": simplex},
        )
        x = best.x
    values = {n: float(np.clip(np.exp(v), *BOUNDS[n])) for n, v in zip(names, best.x, strict=True)}
    return values, before, best.fun


# -- memory-bound ops -----------------------------------------------------------

# The rate of data still in L2 (what the benchmarks' reruns see). The rate of data
# far larger than L2 (cold_dram_efficiency) is not fitted: bench/streaming.py reads
# it off the largest tensors, where neither the plateau nor a harness floor matters.
STREAM_BOUNDS = {"streaming_dram_efficiency": (0.3, 0.95), "saturation_bytes_per_sm": (512, 262144)}
STREAM_START = {"streaming_dram_efficiency": 0.8, "saturation_bytes_per_sm": 32768.0}
READS = {"layernorm": "LAYER_NORM_READS", "softmax": "SOFTMAX_READS"}


def _costed(trace, spec) -> tuple[float, float, float, int]:
    """(bytes with one read, bytes per extra read, FLOPs, kernels) of a one-op trace."""
    ctx = CostContext(precision("fp32"))
    totals = []
    saved = norm.LAYER_NORM_READS, norm.SOFTMAX_READS
    for reads in (1.0, 2.0):
        norm.LAYER_NORM_READS = norm.SOFTMAX_READS = reads
        costs = [c for c in (cost_of(e, ctx) for e in trace.events) if c]
        totals.append(
            (
                sum(c.bytes for c in costs),
                sum(c.flops for c in costs),
                sum(c.kernels for c in costs),
            )
        )
    norm.LAYER_NORM_READS, norm.SOFTMAX_READS = saved
    (b1, flops, kernels), (b2, _, _) = totals
    return b1, b2 - b1, flops, kernels


def memory_arrays(groups, traces) -> list[dict]:
    out = []
    for g in groups:
        spec = gpu(g.gpu)
        rows = np.array([_costed(traces[shape], spec) for shape in g.keys], dtype=float)
        out.append(
            {
                "group": g,
                "bytes": rows[:, 0],
                "extra": rows[:, 1],
                "flops": rows[:, 2],
                "kernels": rows[:, 3],
            }
        )
    return out


def _memory_error(arrays, efficiency: dict[str, dict], reads: dict[str, float]) -> list[float]:
    medians = []
    for a in arrays:
        g = a["group"]
        base = gpu(g.gpu)
        values = efficiency.get(base.architecture, {})
        spec = dataclasses.replace(base, efficiency=dataclasses.replace(base.efficiency, **values))
        n_reads = reads.get(g.op, 1.0)
        moved = a["bytes"] + (n_reads - 1.0) * a["extra"]
        pred = streaming_time_s(moved, spec, a["flops"])
        pred = pred + (a["kernels"] - 1) * streaming_latency_s(spec)
        medians.append(float(np.median(ape(host_bound_s(pred, g.time_s), g.time_s))))
    return medians


def fit_memory(arrays, gemm_fits: dict[str, dict]) -> tuple[dict, dict, dict]:
    """Per family: streaming efficiency and saturation bytes, on element-wise ops;
    then, for all GPUs at once, the effective reads of layer norm and softmax."""
    fits, notes = {}, {}
    families = {}
    for a in arrays:
        if a["group"].op.split(" ")[0] not in READS:
            families.setdefault(gpu(a["group"].gpu).architecture, []).append(a)
    defaults = _architecture_defaults()
    for family, members in sorted(families.items()):
        names = list(STREAM_BOUNDS)
        if defaults.get(family, {}).get("streaming_latency_s"):
            # fitted on kernel-timed element-wise kernels (bench/streaming.py): the
            # host-timed calls here cannot tell the plateau from their harness floor
            names.remove("saturation_bytes_per_sm")

        def values(x, names=names):
            return {
                n: float(np.clip(np.exp(v), *STREAM_BOUNDS[n]))
                for n, v in zip(names, x, strict=True)
            }

        def objective(x, family=family, members=members):
            eff = {family: {**gemm_fits.get(family, {}), **values(x)}}
            return float(np.mean(_memory_error(members, eff, {})))

        x0 = np.log([STREAM_START[n] for n in names])
        simplex = np.vstack([x0] + [x0 + 0.4 * np.eye(len(names))[i] for i in range(len(names))])
        best = minimize(
            objective,
            x0,
            method="Nelder-Mead",
            options={"initial_simplex": simplex, "maxiter": 200},
        )
        fits[family] = values(best.x)
        notes[family] = f"element-wise fit on {len(members)} groups: {best.fun:.1%}"
    efficiency = {
        f: {**gemm_fits.get(f, {}), **fits.get(f, {})} for f in set(gemm_fits) | set(fits)
    }
    reads = {}
    for op in READS:
        members = [a for a in arrays if a["group"].op == op]

        def objective(r, op=op, members=members):
            return float(np.mean(_memory_error(members, efficiency, {op: r})))

        best = minimize_scalar(objective, bounds=(1.0, 3.0), method="bounded")
        reads[op] = float(best.x)
        notes[op] = f"{len(members)} groups: mean group median error {best.fun:.1%}"
    return fits, reads, notes


# A GEMM at small M streams its weight once (serving's decode): `dram_efficiency`
# sets its time. The joint fit above weighs every group's median error alike, so the
# few rows whose time the memory term sets hardly move it; this stage refits it on
# those rows alone: 16-bit, kernel-timed (no harness floor), memory above both
# math and latency at the fitted constants; only where enough rows identify it, and
# kept only where the joint objective cannot tell the two values apart (it moves
# by at most STREAMING_TOLERANCE: half a point of mean group median error).
MIN_STREAMING_ROWS = 20
STREAMING_TOLERANCE = 0.005
_LOW, _HIGH = BOUNDS["dram_efficiency"]
STREAMING_GRID = np.arange(_LOW, _HIGH + 1e-9, 0.0025)


def fit_gemm_streaming(groups: list[Group], values: dict) -> tuple[float | None, str]:
    """(the refitted dram_efficiency or None, a note) on the memory-bound rows."""
    picked = []
    for g in groups:
        if g.timing != "kernel" or g.dtype not in ("fp16", "bf16"):
            continue
        spec = _with(gpu(g.gpu), values)
        p = predict_many(g.m, g.n, g.k, g.b, spec, g.dtype, g.math_dtype)
        bound = p.memory_time_s >= np.maximum(p.math_time_s, p.latency_s)
        if bound.any():
            picked.append((g, bound))
    rows = sum(int(bound.sum()) for _, bound in picked)
    if rows < MIN_STREAMING_ROWS:
        return None, f"streaming GEMM rows {rows} < {MIN_STREAMING_ROWS}: dram_efficiency kept"

    def error(value: float) -> float:
        errors = []
        for g, bound in picked:
            spec = _with(gpu(g.gpu), {**values, "dram_efficiency": value})
            p = predict_many(g.m[bound], g.n[bound], g.k[bound], g.b[bound], spec, g.dtype,
                             g.math_dtype)  # fmt: skip
            errors.append(ape(p.time_s, g.time_s[bound]))
        return float(np.median(np.concatenate(errors)))

    errors = [error(v) for v in STREAMING_GRID]
    best = float(STREAMING_GRID[int(np.argmin(errors))])
    joint = [_joint_error(groups, {**values, "dram_efficiency": v})
             for v in (values["dram_efficiency"], best)]  # fmt: skip
    note = (
        f"dram_efficiency on {rows} memory-bound 16-bit rows: "
        f"{values['dram_efficiency']:.4g} ({error(values['dram_efficiency']):.1%}) -> "
        f"{best:.4g} ({min(errors):.1%}), all groups {joint[0]:.1%} -> {joint[1]:.1%}"
    )
    if joint[1] > joint[0] + STREAMING_TOLERANCE:
        return None, note + ": kept (the other rows tell them apart)"
    return best, note


def _joint_error(groups: list[Group], values: dict) -> float:
    """The joint fit's objective: the mean of the groups' median errors."""
    return float(np.mean([
        np.median(ape(predict_group(g, _with(gpu(g.gpu), values))["model"], g.time_s))
        for g in groups
    ]))  # fmt: skip


def _with(spec, values: dict):
    return dataclasses.replace(spec, efficiency=dataclasses.replace(spec.efficiency, **values))


def keep_family(family: str, groups: list[Group], start: dict) -> tuple[dict, float, float]:
    """A family's constants as they are, with their error (no fit)."""
    rng = np.random.default_rng(0)
    groups = [_subsample(g, rng) for g in groups]
    error = float(np.mean([np.median(ape(predict_group(g)["model"], g.time_s)) for g in groups]))
    return {n: start[n] for n in _free_names(groups)}, error, error


def _fit_job(job):
    return fit_family(*job)


def render(defaults: dict, fitted: dict[str, dict], notes: dict[str, str]) -> str:
    head = ARCHITECTURES_FILE.read_text().split("[default]")[0]
    out = [head.rstrip() + "\n"]
    out.append("[default]")
    for key, value in defaults["default"].items():
        out.append(f"{key} = {value!r}")
    for family in (
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada",
        "hopper",
        "blackwell",
        "cpu",
    ):
        out.append("")
        if family in notes:
            out.append(f"# {notes[family]}")
        out.append(f"[{family}]")
        table = dict(defaults.get(family, {}))
        table.update(fitted.get(INHERIT.get(family, family), {}))
        if family == "cpu":
            table = defaults.get("cpu", {})
        for key, value in table.items():
            out.append(
                f"{key} = {float(value):.4g}" if isinstance(value, float) else f"{key} = {value!r}"
            )
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {ARCHITECTURES_FILE.name}")
    parser.add_argument(
        "--skip-gemm",
        action="store_true",
        help="keep the GEMM constants as they are; fit the memory-bound ones",
    )
    parser.add_argument(
        "--family",
        action="append",
        help="fit only this family's GEMM constants (repeatable); the others keep theirs",
    )
    args = parser.parse_args()
    defaults = _architecture_defaults()
    groups = load_gemm_groups()
    by_family: dict[str, list[Group]] = {}
    for g in groups:
        by_family.setdefault(gpu(g.gpu).architecture, []).append(g)
    if args.family:
        unknown = sorted(set(args.family) - set(by_family))
        if unknown:
            parser.error(f"no GEMM measurements for {', '.join(unknown)}")
    fitted, notes = {}, {}
    jobs = []
    for family, members in sorted(by_family.items()):
        start = dict(defaults["default"])
        start.update({k: v for k, v in defaults.get(family, {}).items() if k in BOUNDS})
        jobs.append((family, members, start))
    refit = [
        job for job in jobs if not args.skip_gemm and (not args.family or job[0] in args.family)
    ]
    with ProcessPoolExecutor(max_workers=2) as pool:
        done = dict(zip((job[0] for job in refit), pool.map(_fit_job, refit), strict=True))
    results = [done.get(job[0]) or keep_family(*job) for job in jobs]
    for (family, members, _), (values, before, after) in zip(jobs, results, strict=True):
        fitted[family] = values
        devices = sorted({g.gpu for g in members})
        notes[family] = (
            f"fitted on {len(members)} groups ({', '.join(devices)}): "
            f"mean group median error {before:.1%} -> {after:.1%}"
        )
        streaming, note = fit_gemm_streaming(members, values)
        if streaming is not None:
            values["dram_efficiency"] = streaming
            notes[family] += f"; {note}"
        print(f"{family}: {note}")
        print(f"{family}: {notes[family]}")
        for key, value in values.items():
            print(f"  {key} = {value:.4g}")
    print("memory-bound ops: tracing one-op modules ...")
    memory_groups, needed = load_memory_groups()
    arrays = memory_arrays(memory_groups, trace_shapes(needed))
    stream, reads, stream_notes = fit_memory(arrays, fitted)
    for family, values in stream.items():
        fitted[family] = {**fitted.get(family, {}), **values}
        notes[family] += f"; {stream_notes[family]}"
        print(f"{family}: {stream_notes[family]}: {values}")
    if "maxwell" in fitted and "pascal" in stream:  # no memory-bound data on Maxwell
        fitted["maxwell"].update(stream["pascal"])
        notes["maxwell"] += "; streaming constants from pascal (no measurements)"
    for op, value in reads.items():
        print(f"{op}: {value:.3f} effective reads ({stream_notes[op]})")
    for family, parent in INHERIT.items():
        notes[family] = f"no measurements: inherits the {parent} constants"
    text = render(defaults, fitted, notes)
    if args.write:
        ARCHITECTURES_FILE.write_text(text)
        print(f"wrote {ARCHITECTURES_FILE}")
        norm.CALIBRATION_FILE.write_text(
            "# Constants of PyTorch's memory-bound kernels, the same on every GPU.\n"
            "# Written by bench/calibrate.py from the measured data in ../shared/data.\n"
            f"layer_norm_reads = {reads['layernorm']:.4g}\n"
            f"softmax_reads = {reads['softmax']:.4g}\n"
        )
        print(f"wrote {norm.CALIBRATION_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
