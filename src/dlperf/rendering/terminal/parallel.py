"""`dlperf plan` and `dlperf measure-comm`: plans on many GPUs, and the
collectives they price."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import gib, seconds, si, wide_console

PLAN_COLUMNS = (
    "plan",
    "micro-batches",
    "memory/GPU",
    "fits",
    "compute",
    "comm (exposed)",
    "step",
    "throughput",
)


def plan_report(r, top: int = 12, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(
        f"[bold]{escape(r.model)}[/] on {r.gpus} x [bold]{r.gpu}[/] ({r.gpus_per_node} per node), "
        f"{r.precision}: global batch {r.global_batch}, micro-batch {r.micro_batch}, "
        f"{r.params / 1e9:,.2f} B parameters"
    )
    fitting = sum(p.fits for p in r.plans)
    console.print(f"{fitting} of {len(r.plans)} plans fit in memory; best first")
    table = Table()
    for col in PLAN_COLUMNS:
        table.add_column(col, justify="left" if col == "plan" else "right")
    for p in r.plans[:top]:
        table.add_row(*_plan_row(p))
    console.print(table)
    best = r.plans[0]
    if best.collectives:
        parts = ", ".join(
            f"{name} {gib(c['bytes'])} in {seconds(c['time_s'])}"
            for name, c in best.collectives.items()
        )
        console.print(f"collectives per step of {best.name}: {parts}")


def _plan_row(p) -> tuple[str, ...]:
    rate = f"{p.tokens_per_s:,.0f} tok/s" if p.tokens_per_s else f"{p.samples_per_s:,.1f} samples/s"
    return (
        p.name,
        str(p.accumulate),
        gib(p.memory_per_gpu_bytes),
        "yes" if p.fits else "[red]no[/]",
        seconds(p.compute_time_s),
        f"{seconds(p.comm_time_s)} ({seconds(p.exposed_comm_s)})",
        seconds(p.step_time_s),
        rate,
    )


def comm_report(result: dict, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(f"collectives over {result['world']} ranks ({result['backend']})")
    table = Table()
    for col in ("collective", "bytes", "median time", "bus bandwidth"):
        table.add_column(col, justify="left" if col == "collective" else "right")
    for c in result["collectives"]:
        table.add_row(
            c["op"],
            si(c["bytes"], "B"),
            seconds(c["time_s"]),
            si(c["bus_bandwidth_bytes_per_s"], "B/s"),
        )
    console.print(table)
    for op, why in result.get("skipped", {}).items():
        console.print(f"[yellow]{op} skipped:[/] {why}")
    fit = result.get("interconnect") or {}
    if fit.get("bandwidth_bytes_per_s"):
        console.print(
            f"fit: {si(fit['bandwidth_bytes_per_s'], 'B/s')} per link, "
            f"{seconds(fit['latency_s'])} per ring step"
        )
