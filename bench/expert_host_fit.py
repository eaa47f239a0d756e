"""Fit `te_expert_gemm_host_s` (spec data, `_framework_host.toml`): the host's
seconds per expert GEMM of Transformer Engine's GroupedLinear, where the host
issues a layer's experts one by one (`dlperf.parallel.expert_host`).

Every MoE row of NVIDIA's development table (`nvidia_training.py`) is priced
at each candidate figure; the fit is the figure with the least median |error|
over them all (rows whose experts run in CUDA graphs, or on GB200 with a few
experts a GPU, do not move and count as they are). Then leave-one-GPU-out:
the figure refit without one GPU's rows (and without Blackwell's, B200 and
GB200 together), and the left-out rows' median |error| at it.

The figure enters a plan after the model's profile (traced once per row), so
each row's profiles are kept and only the plans are priced again.

Run: python bench/expert_host_fit.py [--grid 0,10,20,...] (microseconds)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nvidia_training as nt  # noqa: E402

GRID_US = (0, 10, 20, 30, 40, 50, 60, 70, 80, 100, 120)


def _priced(rows: list[dict], grid: list[float]) -> dict[str, dict[float, float]]:
    """Per row id, the predicted tokens/s per GPU at each figure of `grid`."""
    import dlperf.parallel.report as report
    from dlperf.hardware.framework import framework_host
    from dlperf.run import Session

    made, kept, calls = report.profile, {}, {"row": "", "n": 0}

    def profile(run, session, micro_batch):  # a row's profiles, in the order it asks
        calls["n"] += 1
        key = (calls["row"], calls["n"])
        if key not in kept:
            kept[key] = made(run, session, micro_batch)
        return kept[key]

    report.profile = profile
    session, out = Session(), {}
    try:
        for row in rows:
            for seconds in grid:
                report.framework_host = lambda arch, s=seconds: dataclasses.replace(
                    framework_host(arch), te_expert_gemm_host_s=s)  # fmt: skip
                calls["row"], calls["n"] = row["id"], 0
                result = nt.predict(row, session)
                if result.skipped:
                    break
                out.setdefault(row["id"], {})[seconds] = result.predicted
            print(f"  {row['id']}", file=sys.stderr, flush=True)
    finally:
        report.profile, report.framework_host = made, framework_host
    return out


def _median_abs(rows, priced, seconds) -> float:
    errors = [abs(priced[r["id"]][seconds] / r["published"]["value"] - 1)
              for r in rows if r["id"] in priced]  # fmt: skip
    return statistics.median(errors) if errors else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=",".join(map(str, GRID_US)),
                        help="candidate figures, microseconds")  # fmt: skip
    args = parser.parse_args(argv)
    grid = [float(x) * 1e-6 for x in args.grid.split(",")]
    rows = [r for r in json.loads(nt.CASES.read_text())["cases"] if "moe" in r["flags"]]
    start = time.perf_counter()
    priced = _priced(rows, grid)
    rows = [r for r in rows if r["id"] in priced]
    print("| figure (us) | MoE median abs error | " + " | ".join(
        sorted({nt.SHORT[r["gpu"]] for r in rows})) + " |")  # fmt: skip
    gpus = sorted({r["gpu"] for r in rows}, key=lambda g: nt.SHORT[g])
    print("|---" * (2 + len(gpus)) + "|")
    for seconds in grid:
        cells = [f"{_median_abs([r for r in rows if r['gpu'] == g], priced, seconds):.1%}"
                 for g in gpus]  # fmt: skip
        print(f"| {seconds * 1e6:g} | {_median_abs(rows, priced, seconds):.1%} | "
              + " | ".join(cells) + " |")  # fmt: skip
    best = min(grid, key=lambda s: _median_abs(rows, priced, s))
    print(f"\nfit on all {len(rows)} MoE rows: {best * 1e6:g} us")
    print("\n| left out | fit without it (us) | its median abs error | at the full fit |")
    print("|---|---|---|---|")
    groups = {nt.SHORT[g]: (g,) for g in gpus} | {"Blackwell": ("b200-sxm-180gb", "gb200")}
    for name, members in groups.items():
        held = [r for r in rows if r["gpu"] in members]
        rest = [r for r in rows if r["gpu"] not in members]
        refit = min(grid, key=lambda s: _median_abs(rest, priced, s))
        print(f"| {name} ({len(held)} rows) | {refit * 1e6:g} | "
              f"{_median_abs(held, priced, refit):.1%} | {_median_abs(held, priced, best):.1%} |")
    print(f"\n{len(rows)} rows in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
