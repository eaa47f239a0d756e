"""Careless values on every flag of every verb (issue 36): each answers with a
one-line refusal (exit 2), runs (exit 0, its meaning documented in the flag's
help), or fails as dlperf's own bug (exit 3, or an exception escaping `main`):
the crashes must be 0.

For each verb, a small run that succeeds as given (a two-layer model, one
GPU), then each flag that takes a value set in turn to each of the values a
careless user types: 0, negative, huge, nan, inf, empty, a word, and the same
flag twice. Flags that name a file get a missing file, a folder and a file of
the wrong kind. Runs in-process (`dlperf.cli.main`), one call at a time.

Run: python bench/flag_sweep.py [--verbs serve,plan] [--limit N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlperf.cli import build_parser, main  # noqa: E402

GPT = "hf:gpt2:layers=2,hidden=64,heads=2,vocab=128,positions=128"
LLAMA = "hf:llama:layers=2,hidden=64,heads=4,kv_heads=2,mlp=128,vocab=128,positions=256"
# A run of each verb that succeeds as given; each flag is swept on top of it.
BASES = {
    "analyze": ["analyze", GPT, "--gpu", "a100"],
    "memory": ["memory", GPT, "--gpu", "a100"],
    "advise": ["advise", GPT, "--gpu", "a100"],
    "plan": ["plan", LLAMA, "--gpu", "h100", "--gpus", "8"],
    "serve": ["serve", LLAMA, "--gpu", "h100", "--input-len", "32", "--output-len", "8"],
    "gemm": ["gemm", "256", "256", "256", "--gpu", "a100"],
    "gpus": ["gpus"],
}
VALUES = ["0", "-1", "1e30", "nan", "inf", "", "abc"]
SKIP = {"--help", "--config", "--debug", "--html", "--json", "--out", "--save"}


def value_flags(verb: str) -> list[str]:
    """The verb's flags that take a value (not switches, not positionals)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = []
    for action in sub.choices[verb]._actions:
        if not action.option_strings or action.nargs == 0:
            continue
        flag = max(action.option_strings, key=len)
        if flag not in SKIP:
            flags.append(flag)
    return flags


def run(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of one call; an escaping exception is exit 3."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's own refusals
            code = stop.code if isinstance(stop.code, int) else 2
        except Exception as escaped:  # noqa: BLE001 - counted as a crash
            return 3, f"{type(escaped).__name__}: {escaped}"
    return code, err.getvalue()


def classify(code: int, err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if code == 0:
        return "accepted"
    if code == 3 or "Traceback" in err or "internal error" in err:
        return "crash"
    if code == 2 and lines and all(
        line.startswith(("dlperf: error:", "usage:", "dlperf ")) for line in lines
    ):
        return "refused"
    return "refused (not one line)" if code == 2 else f"exit {code}"


def cases(verb: str, folder: Path) -> list[list[str]]:
    base = BASES[verb]
    out = []
    for flag in value_flags(verb):
        for value in VALUES:
            out.append([*base, flag, value])
        out.append([*base, flag, "1", flag, "2"])
        if flag in ("--gpu", "--trace", "--dataset", "--spec"):
            out += [[*base, flag, str(folder / "missing.json")], [*base, flag, str(folder)],
                    [*base, flag, str(folder / "notes.txt")]]  # fmt: skip
    return out


def main_sweep() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbs", default=",".join(BASES))
    parser.add_argument("--limit", type=int, default=0, help="cases per verb at most")
    args = parser.parse_args()
    totals, crashes = Counter(), []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "notes.txt").write_text("not a spec, trace or dataset\n")
        for verb in args.verbs.split(","):
            code, err = run(BASES[verb])
            if code != 0:
                print(f"{verb}: the base run fails ({err.strip()[:200]}); skipped")
                continue
            counts = Counter()
            todo = cases(verb, folder)[: args.limit or None]
            for argv in todo:
                kind = classify(*run(argv))
                counts[kind] += 1
                if kind not in ("accepted", "refused"):
                    crashes.append((kind, argv[len(BASES[verb]):], run(argv)[1].strip()[:300]))
            totals.update(counts)
            print(f"{verb}: {len(todo)} tried: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"\nall: {sum(totals.values())} tried in {time.time() - started:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))  # fmt: skip
    for kind, argv, err in crashes:
        print(f"- {kind}: {' '.join(argv)!r}: {err}")
    return 1 if any(kind == "crash" for kind, _, _ in crashes) else 0


if __name__ == "__main__":
    sys.exit(main_sweep())
