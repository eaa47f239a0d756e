"""One-line messages of the verbs that write files (`report`, `sweep`), and
the list of sweeps."""

from __future__ import annotations

import sys


def written(doc: dict) -> None:
    """`wrote PATH, ...`: the file of `doc["out"]`, or the files of `doc["written"]`."""
    paths = doc["written"] if "written" in doc else [doc["out"]]
    sys.stdout.write("wrote " + ", ".join(paths) + "\n")


def sweeps_list(doc: dict) -> None:
    for s in doc["sweeps"]:
        sys.stdout.write(f"{s['name']:18s} {s['title']} (default --gpu {s['default_gpu']})\n")
