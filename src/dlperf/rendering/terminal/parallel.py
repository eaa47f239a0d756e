"""`dlperf plan` and `dlperf measure-comm`: plans on many GPUs, and the
collectives they price."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import durations, gib, parameters, seconds, si, sig, wide_console

PLAN_COLUMNS = (
    "#",
    "plan",
    "ckpt",
    "m",
    "memory/GPU",
    "fits",
    "compute (bubble)",
    "comm (exposed)",
    "step",
    "throughput",
    "MFU",
)


def plan_report(r, top: int = 12, console: Console | None = None) -> None:
    console = console or wide_console()
    domain = f", NVLink across {r.nvlink_domain}" if r.nvlink_domain > r.gpus_per_node else ""
    console.print(
        f"[bold]{escape(r.model)}[/] on {r.gpus} x [bold]{r.gpu}[/] "
        f"({r.gpus_per_node} per node{domain}, {gib(r.memory_bytes)} each), {r.precision}: "
        f"global batch {r.global_batch}, "
        f"micro-batch {r.micro_batch}, {parameters(r.params)}"
    )
    if r.fixed:
        given = ", ".join(f"{k} {v}" for k, v in r.fixed.items())
        console.print(f"fixed: {escape(given)}; {r.searched} variants priced")
    if r.note:
        console.print(f"[bold red]{escape(r.note)}[/]")
    else:
        console.print(f"{r.fitting} of {len(r.plans)} layouts fit in memory; fastest first")
    table = Table()
    widest = max((len(p.name.split("-ckpt:")[0]) for p in r.plans[:top]), default=4)
    for col in PLAN_COLUMNS:
        left = col in ("plan", "ckpt")
        table.add_column(
            col, justify="left" if left else "right", min_width=widest if col == "plan" else None
        )
    for rank, p in enumerate(r.plans[:top], start=1):
        table.add_row(str(rank) if p.fits else "-", *_plan_row(p))
    console.print(table)
    for p in r.plans[:top]:
        if p.to_fit:
            console.print(f"{escape(p.name)} would fit with: " + escape("; ".join(p.to_fit)))
    _collectives(r.plans[0], console)


def _collectives(best, console: Console) -> None:
    if not best.collectives:
        return
    m = best.memory
    if m:
        console.print(
            f"memory per GPU of {escape(best.name)} ({m.stage} stage): weights "
            f"{gib(m.weights_bytes)}, gradients {gib(m.gradients_bytes)}, optimizer "
            f"{gib(m.optimizer_bytes)}, activations {gib(m.activations_bytes)}, transient "
            f"{gib(m.transient_bytes)}, buffers {gib(m.buffers_bytes)}, framework "
            f"{gib(m.overhead_bytes)}"
        )
    parts = ", ".join(
        f"{c.name} {gib(c.bytes)} in {seconds(c.time_s)} ({seconds(c.exposed_time_s)} exposed)"
        for c in best.collectives
    )
    console.print(f"collectives per step per GPU: {parts}")


def _plan_row(p) -> tuple[str, ...]:
    if p.tokens_per_s_per_gpu:
        rate = f"{sig(p.tokens_per_s_per_gpu)} tok/s/GPU"
    else:
        rate = f"{sig(p.samples_per_s)} samples/s"
    return (
        escape(p.name.split("-ckpt:")[0]),
        p.checkpoint,
        str(p.accumulate),
        gib(p.memory_per_gpu_bytes),
        "yes" if p.fits else "[red]no[/]",
        f"{seconds(p.compute_time_s)} ({seconds(p.bubble_time_s)})",
        f"{seconds(p.comm_time_s)} ({seconds(p.exposed_comm_s)})",
        seconds(p.step_time_s),
        rate,
        f"{p.mfu:.0%}",
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


def run_choices(doc: dict, top: int = 12, console: Console | None = None) -> None:
    """`dlperf plan --gpus 8,16,... --tokens N [--rank cost] [--deadline D]`."""
    console = console or wide_console()
    deadline = doc["deadline_s"]
    rank = doc["rank"]
    if rank == "cost" and all(c["cost"] is None for c in doc["choices"]):
        rank = "GPU-hours (the cost at any price; --price-per-gpu-hour prices it)"
    title = f"the run at each GPU count, best first by {rank}"
    if deadline:
        title += f" (deadline {seconds(deadline)})"
    table = Table(title=title)
    for column in ("GPUs", "best plan", "step", "run", "GPU-hours", "cost", "deadline"):
        table.add_column(column, justify="left" if column == "best plan" else "right")
    choices = doc["choices"]
    steps = durations(c["step_s"] for c in choices)  # one unit a column
    runs = durations(c["run_s"] for c in choices)
    for c, step, run in zip(choices, steps, runs, strict=True):
        cost = sig(c["cost"]) if c["cost"] is not None else "-"
        met = "met" if c["meets_deadline"] else "[red]missed[/]"
        table.add_row(str(c["gpus"]), escape(c["plan"]), step, run, sig(c["gpu_hours"]), cost,
                      met if deadline else "")  # fmt: skip
    console.print(table)
    plan_report(doc["chosen"], top=top, console=console)
