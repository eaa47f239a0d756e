"""`dlperf advise`: the rules, the findings, and the fixes applied."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import gib, seconds, wide_console


def rules_table(rules, console: Console | None = None) -> None:
    console = console or wide_console()
    table = Table(title="rules")
    for col in ("rule", "what it finds", "source", "automatic fix"):
        table.add_column(col)
    for r in rules:
        table.add_row(r.id, r.title, r.source, "yes" if r.fix else "")
    console.print(table)


def rules_document(rules) -> dict:
    return {
        "rules": [
            {"rule": r.id, "title": r.title, "source": r.source, "automatic_fix": bool(r.fix)}
            for r in rules
        ]
    }


def advice_report(a, console: Console | None = None) -> None:
    console = console or wide_console()
    mode = "training" if a.training else "inference"
    console.print(
        f"[bold]{escape(a.model)}[/] on [bold]{a.gpu}[/], {a.precision}, {mode}: "
        f"predicted step {seconds(a.predicted_time_s)} -> "
        f"{seconds(a.predicted_time_after_s)} with every finding applied "
        f"({a.predicted_time_s / a.predicted_time_after_s:.2f}x)"
    )
    if not a.findings:
        console.print("no findings: this model follows the guides' rules on this GPU")
        return
    table = Table()
    for col in ("rule", "severity", "modules", "fix", "gain", "how"):
        table.add_column(col, overflow="fold")
    for f in a.findings:
        modules = ", ".join(f.modules[:3]) + (" ..." if len(f.modules) > 3 else "")
        gain = f"{seconds(f.gain_time_s)} ({f.gain_fraction:.1%})" if f.gain_time_s else ""
        if f.gain_memory_bytes:
            gain += f" {gib(f.gain_memory_bytes)}"
        table.add_row(f.rule, f.severity, modules, f.fix, gain, f.how)
    console.print(table)


def applied_report(r) -> None:
    """One line: the fixes `advise --apply` applied and the predicted step before and after."""
    before, after = r.predicted_time_s, r.predicted_time_after_s
    sys.stdout.write(
        f"applied {', '.join(r.applied) or 'nothing (no finding)'}: "
        f"predicted step {before * 1e3:.3g} ms -> {after * 1e3:.3g} ms ({r.speedup:.2f}x)\n"
    )
