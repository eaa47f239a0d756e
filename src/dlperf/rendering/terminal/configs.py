"""`dlperf explain-config` (the run a framework's config became, field by
field) and `dlperf models` (the bundled checkpoints)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import wide_console


def _short(value, width: int = 48) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


# Switches the command line can also turn off (`--no-...`); the others are off unless given.
_NEGATABLE = ("clip_grad", "sequence_parallel")


def _flag(key: str, value) -> str:
    """An option as typed: a switch alone (--compile, --no-clip-grad), others with a value."""
    flag = key.replace("_", "-")
    if value is True:
        return f"--{flag}"
    if value is False:
        return f"--no-{flag}" if key in _NEGATABLE else ""
    return f"--{flag} {value}"


def explain_config(job, console: Console | None = None, run_config: dict | None = None) -> None:
    console = console or wide_console()
    console.print(f"[bold]{escape(job.path)}[/]: a {job.format} config")
    console.print(f"model: {escape(job.model or '(none: give MODEL)')}")
    run = dict(job.options)
    if job.micro_batch:
        run["micro-batch"] = job.micro_batch
    if job.grad_accum:
        run["accumulate"] = job.grad_accum
    if job.global_batch:
        run["global-batch"] = job.global_batch
    run |= job.parallel | job.serving
    said = " ".join(filter(None, (_flag(k, v) for k, v in run.items())))
    console.print(f"dlperf options: {escape(said or '(none)')}")
    if run_config:
        said = " ".join(f"{k}={v}" for k, v in run_config.items())
        console.print(f"run config (dlperf.RunConfig): {escape(said)}")
    table = Table(title="fields")
    table.add_column("field")
    table.add_column("value")
    table.add_column("became, or why ignored")
    for f in job.fields:
        what = f.became if f.became else f"[dim]ignored: {escape(f.ignored)}[/]"
        table.add_row(escape(f.name), escape(_short(f.value)), what)
    console.print(table)
    unknown = job.unknown
    if unknown:
        names = ", ".join(f.name for f in unknown)
        console.print(f"[yellow]{len(unknown)} unknown field(s)[/], not used: {escape(names)}")


def models_table(models: list[dict], console: Console | None = None) -> None:
    console = console or wide_console()
    table = Table(title=f"bundled checkpoints ({len(models)}): hf:ORG/NAME builds them offline")
    for column in ("id", "model type", "layers", "hidden", "source"):
        table.add_column(column)
    for m in models:
        row = (m["id"], m["model_type"], m["layers"], m["hidden"], m["source"])
        table.add_row(*(escape(str(v)) for v in row))
    console.print(table)
