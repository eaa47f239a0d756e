"""`dlperf memory`: one training step's memory per GPU, and what fits."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import gib, parameters, seconds, wide_console

# The breakdown's rows: label and report field; the first three also per parameter.
TERMS = (
    ("weights", "weights_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer states", "optimizer_bytes"),
    ("activations (saved for backward)", "activations_bytes"),
    ("largest backward transient", "transient_bytes"),
    ("caching allocator's reserve", "allocator_bytes"),
    ("CUDA context and cuBLAS workspace", "overhead_bytes"),
)
PER_PARAMETER = ("weights", "gradients", "optimizer states")


def memory_report(r, console: Console | None = None) -> None:
    console = console or wide_console()
    micro = f", micro-batch {r.micro_batch} x {r.accumulate}" if r.accumulate > 1 else ""
    console.print(
        f"[bold]{escape(r.model)}[/] training on [bold]{r.gpu}[/], {r.precision}, {r.optimizer}, "
        f"checkpoint {r.checkpoint}: batch {r.batch}{micro}, {parameters(r.params)}"
    )
    verdict = "[green]fits[/]" if r.fits else "[red]does not fit[/]"
    console.print(
        f"peak {gib(r.peak_bytes)} during {r.peak_phase} of {gib(r.capacity_bytes)}: {verdict} "
        f"(tensors {gib(r.allocated_bytes)}, reserved by the allocator {gib(r.reserved_bytes)}, "
        f"context and workspace {gib(r.overhead_bytes)})"
    )
    console.print(_breakdown(r))
    if r.recompute_s:
        console.print(f"checkpointing recomputes {seconds(r.recompute_s)} of forward per step")
    console.print(_what_ifs(r))
    mods = Table(title="activations by module (top 12)")
    mods.add_column("module")
    mods.add_column("saved", justify="right")
    for name, value in list(r.by_module.items())[:12]:
        mods.add_row(name, gib(value))
    console.print(mods)
    _fit(r, console)


def _breakdown(r) -> Table:
    table = Table(title="breakdown")
    table.add_column("term")
    table.add_column("bytes", justify="right")
    table.add_column("per parameter", justify="right")
    for label, field in TERMS:
        value = getattr(r, field)
        per = f"{value / r.params:.1f} B" if r.params and label in PER_PARAMETER else ""
        table.add_row(label, gib(value), per)
    return table


def _what_ifs(r) -> Table:
    table = Table(title="checkpointing what-ifs")
    for col in ("checkpoint", "activations", "frees", "peak", "recompute", "fits"):
        table.add_column(col, justify="right" if col != "checkpoint" else "left")
    for p in r.policies:
        frees = f"{p.frees_share:.0%}" + (" [yellow](little)[/]" if p.frees_little else "")
        table.add_row(
            p["checkpoint"],
            gib(p["activations_bytes"]),
            frees,
            gib(p["peak_bytes"]),
            seconds(p["recompute_s"]),
            "yes" if p["fits"] else "no",
        )
    return table


def _fit(r, console: Console) -> None:
    """What --fit found: the largest batch, and for token models the longest sequence."""
    if r.max_batch == 0:  # the search found no batch at all
        console.print("[red]does not fit even at batch 1[/]")
    elif r.max_batch is not None:
        console.print(f"largest batch that fits: {r.max_batch}")
    if r.max_seq_len == 0:  # the sequence search starts at 64 tokens (training_memory)
        console.print("[red]no sequence length of 64 tokens or more fits at this batch[/]")
    elif r.max_seq_len is not None:
        limit = getattr(r, "max_seq_len_position_limit", None)
        why = " (the model's position limit; memory may allow more)" if limit else ""
        console.print(f"largest sequence length that fits at this batch: {r.max_seq_len}{why}")
