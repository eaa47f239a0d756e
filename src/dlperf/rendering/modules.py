"""Time by module, one level at a time.

`Analysis.modules(depth)` sums every level up to `depth`, so a parent and its
children both hold the same time. Listed flat, their shares add up to more
than the step. Here the top-level modules come first, each followed by its
slowest children with their share of that parent: the shares of one level
under one parent never add up to more than 100%.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass
class ModuleLine:
    path: str
    level: int  # 1 for a top-level module
    ops: int
    time_s: float
    share_of_step: float
    share_of_parent: float  # of the step for a top-level module


def module_tree(analysis, depth: int = 2, top: int = 10, children: int = 5) -> list[ModuleLine]:
    """The `top` slowest top-level modules, each followed (depth first) by its
    `children` slowest sub-modules, down to `depth` levels."""
    stats = analysis.modules(depth)
    kids: dict[str, list[str]] = defaultdict(list)
    for path in stats:
        kids[path.rpartition(".")[0]].append(path)  # "" is the parent of the top level
    step = analysis.time_s
    lines: list[ModuleLine] = []

    def walk(parent: str, level: int, limit: int) -> None:
        base = stats[parent]["time_s"] if parent else step
        ranked = sorted(kids.get(parent, ()), key=lambda p: stats[p]["time_s"], reverse=True)
        for path in ranked[:limit]:
            entry = stats[path]
            lines.append(
                ModuleLine(
                    path,
                    level,
                    entry["ops"],
                    entry["time_s"],
                    entry["time_s"] / step if step else 0.0,
                    entry["time_s"] / base if base else 0.0,
                )
            )
            if level < depth:
                walk(path, level + 1, children)

    walk("", 1, top)
    return lines
