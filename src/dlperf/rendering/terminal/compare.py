"""`dlperf compare`: predicted beside measured, per category, module and op."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import PHASE, beside_table, seconds, shapes_text, short_op, wide_console


def compare_report(c, top: int = 10, console: Console | None = None) -> None:
    if hasattr(c, "ranks"):
        return _ranks_report(c, top, console)
    console = console or wide_console()
    where = f"{c.device or c.gpu}"
    console.print(
        f"[bold]{escape(c.model)}[/] against [bold]{escape(c.path)}[/] ({escape(where)}, "
        f"priced as {c.gpu}), {c.steps} step(s): step predicted {seconds(c.predicted_step_s)}, "
        f"measured {seconds(c.measured_step_s)}"
    )
    console.print(
        f"measured time mapped to model ops or named categories: {c.mapped_share:.1%} "
        f"({len(c.rows)} ops matched{_other_shapes(c)}, {len(c.unmatched_rows)} predicted ops "
        "not in the trace)"
    )
    for note in c.notes:
        console.print(f"[yellow]{escape(note)}[/]")
    console.print(_categories(c))
    console.print(_misses(c.misses[:top]))
    console.print(_modules(c.modules[:top]))
    if c.outside:
        console.print(_outside(c.outside[:top]))
    if c.communication:
        console.print(_communication(c.communication))
    return None


def _other_shapes(c) -> str:
    """How many matched ops ran with other shapes than predicted: matched by
    name, their comparison is of other work (the headline's mapped share
    counts them)."""
    other = getattr(c, "other_shapes", None)
    if other is None:
        return ", by name alone (no shapes recorded)"
    return f", {other} of them with other input shapes than predicted" if other else ""


def _categories(c) -> Table:
    table = beside_table(
        "by category, per step (measured includes time on no model op)",
        "category",
        ((name, v["predicted_s"], v["measured_s"]) for name, v in c.categories.items()),
    )
    if c.idle_s:
        table.add_row("idle (GPU waits)", "", seconds(c.idle_s), "")
    return table


def _misses(rows) -> Table:
    table = Table(title=f"the {len(rows)} largest misses (measured - predicted, per step)")
    cols = ("module", "op", "phase", "shapes", "bound", "predicted", "measured", "x", "of roofline")
    for col in cols:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            escape(r.module),
            short_op(r.op),
            PHASE.get(r.phase, r.phase),
            shapes_text(r.shapes, 2),
            r.bound,
            seconds(r.predicted_s),
            seconds(r.measured_s),
            f"{r.ratio:.2f}" if r.predicted_s else "-",
            f"{r.fraction_of_roofline:.0%}",
        )
    return table


def _modules(modules) -> Table:
    entries = ((m["module"], m["predicted_s"], m["measured_s"]) for m in modules)
    return beside_table("by module (matched ops)", "module", entries)


def _outside(entries) -> Table:
    table = Table(title="measured time on no predicted op")
    for col in ("launched by", "category", "per step"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(escape(e["name"]), e["category"], seconds(e["measured_s"]))
    return table


def _communication(comm: dict) -> str:
    line = (
        f"communication: {comm['kernels']} kernels, {seconds(comm['time_s'])} per step, "
        f"{seconds(comm['exposed_s'])} exposed (no compute kernel beside it)"
    )
    if comm["priced_kernels"]:
        line += (
            f"; {comm['priced_kernels']} with recorded sizes: measured "
            f"{seconds(comm['priced_measured_s'])}, dlperf's collective model "
            f"{seconds(comm['priced_predicted_s'])}"
        )
    if comm["unpriced_kernels"]:
        line += f"; {comm['unpriced_kernels']} not priced (the trace records no message size)"
    return line


def _ranks_report(r, top: int, console: Console | None) -> None:
    console = console or wide_console()
    table = Table(title=f"{escape(r.path)}: one trace per rank")
    cols = ("rank", "trace", "step measured", "step predicted", "busy", "idle", "comm", "exposed")
    for col in cols:
        table.add_column(col)
    slow = r.slowest
    for i, c in enumerate(r.ranks):
        comm = c.communication or {}
        mark = " (slowest)" if c is slow else ""
        table.add_row(
            str(c.rank if c.rank is not None else i) + mark,
            escape(c.path),
            seconds(c.measured_step_s),
            seconds(c.predicted_step_s),
            seconds(c.busy_s),
            seconds(c.idle_s),
            seconds(comm.get("time_s", 0.0)),
            seconds(comm.get("exposed_s", 0.0)),
        )
    console.print(table)
    console.print(f"the slowest rank, {escape(slow.path)}:")
    compare_report(slow, top, console)
