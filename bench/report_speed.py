"""`dlperf report` against `dlperf analyze` of the same run (issue target: at
most 1.3x), each in a fresh process, alternating so that both see the same
machine load. The report adds the memory, the advice (whose fixes are
traced only where they change the model) and the HTML charts to one trace.

Run: python bench/report_speed.py [--repeats N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = ["hf:gpt2", "--gpu", "a100", "--precision", "amp-bf16", "--train"]
TARGET = 1.3


def wall_s(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dlperf", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    out = Path(tempfile.mkdtemp()) / "report.html"
    analyze, report = [], []
    for _ in range(repeats):
        analyze.append(wall_s(["analyze", *RUN, "--json"]))
        report.append(wall_s(["report", *RUN, "--out", str(out)]))
    a, r = statistics.median(analyze), statistics.median(report)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}")
    print(f"analyze {' '.join(f'{t:.2f}' for t in analyze)} s, median {a:.2f} s")
    print(f"report  {' '.join(f'{t:.2f}' for t in report)} s, median {r:.2f} s")
    verdict = "meets" if r / a <= TARGET else "misses"
    print(f"report / analyze = {r / a:.2f} ({verdict} the {TARGET}x target)")


if __name__ == "__main__":
    main()
