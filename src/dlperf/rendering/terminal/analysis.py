"""`dlperf analyze`: the step's totals, its slowest ops, and the time by
category, phase and module."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ...kinds import LossKind
from ..modules import module_tree
from .format import (
    PHASE,
    energy,
    gib,
    parameters,
    seconds,
    shapes_text,
    short_op,
    si,
    sig,
    wide_console,
)


def analysis_report(
    a, top: int = 15, depth: int = 2, console: Console | None = None, run: dict | None = None
) -> None:
    console = console or wide_console()
    _header(a, console)
    if run:
        console.print(_run_line(run))
    console.print(_top_ops(a, top))
    console.print(_categories(a))
    console.print(_phases(a))
    console.print(_modules(a, depth))
    if a.unsupported_ops:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(a.unsupported_ops.items()))
        console.print(
            f"[yellow]unsupported ops (priced as memory-bound on their tensors):[/] {listed}"
        )


def _header(a, console: Console) -> None:
    totals = a.totals
    mode = "training step" if a.training else "inference step"
    console.print(
        f"[bold]{escape(a.model)}[/] on [bold]{a.gpu}[/], {a.precision}, {mode}: "
        f"{parameters(a.params)}, batch {a.batch}"
    )
    tput = a.throughput
    rate = f"{sig(tput.get('samples_per_s', 0))} samples/s"
    if "tokens_per_s" in tput:
        rate += f", {sig(tput['tokens_per_s'])} tokens/s"
    console.print(
        f"predicted step time [bold]{seconds(a.step_time_s)}[/] ({rate}); "
        f"{si(totals['flops'], 'FLOP')}, {si(totals['bytes'], 'B')} moved, "
        f"{totals['kernels']} kernels; MFU {a.mfu:.0%}"
    )
    energy = a.energy
    if energy:
        console.print(
            f"energy {energy.joules:,.1f} J per step: average {energy.average_watts:,.0f} W of "
            f"its {energy.cap_watts:,.0f} W (idle share and each kernel's busier unit, "
            "kernels.energy)"
        )
    memory = a.memory
    if memory and not memory["fits"]:
        console.print(
            f"[red]this step does not fit: it needs {gib(memory['peak_bytes'])} per GPU, the GPU "
            f"has {gib(memory['gpu_bytes'])}[/] (dlperf memory shows where it goes, dlperf plan "
            "how to split it); the time above is for a GPU that holds it"
        )
    for line in run_lines(a):
        console.print(line)


def _run_line(run: dict) -> str:
    """A run of --steps (or --tokens): its time, energy and, with a price, its cost."""
    text = f"a run of {run['steps']:,} steps: {seconds(run['time_s'])}"
    if run.get("energy_j") is not None:
        text += f", {energy(run['energy_j'])} per GPU"
    cost = run.get("cost")
    if cost:
        text += f"; {sig(cost['per_run'])} at {cost['price_per_gpu_hour']:g} a GPU-hour"
        if "per_million_tokens" in cost:
            text += f" ({sig(cost['per_million_tokens'])} per million tokens)"
    return text


def run_lines(a) -> list[str]:
    """How the step runs, in a line each: the host, checkpointing, compile, attention."""
    lines = []
    host = a.host
    if host and host.idle_s > 0.005 * host.step_s:
        how = "CUDA graphs" if host.cuda_graphs else ("compiled" if host.compiled else "eager")
        lines.append(
            f"host ({how}): the GPU waits {seconds(host.idle_s)} ({host.idle_share:.0%} of the "
            f"step) for kernels to be issued and between them; kernels alone take "
            f"{seconds(host.gpu_busy_s)}"
        )
    if a.checkpoint != "none":
        recompute = a.phases.get("recompute", {}).get("time_s", 0.0)
        lines.append(f"checkpoint {a.checkpoint}: {seconds(recompute)} of recomputed forward")
    if a.fusion:
        f = a.fusion
        lines.append(
            f"compiled: {f.kernels_before} kernels before fusion, {f.kernels_after} after "
            f"({len(f.groups)} kinds of fused kernel, {len(f.folded)} convolutions folded); "
            f"the same step eager: {seconds(f.eager_step_s)}"
        )
        for g in f.groups[:3]:
            lines.append(f"  fused x{g.count}: {' + '.join(g.ops)}")
    backends = _attention_backends(a)
    if backends:
        lines.append(f"attention: {backends}")
    sparse = sum(any(n.startswith("2:4 sparse") for n in r.notes) for r in a.rows)
    if sparse:
        lines.append(
            f"2:4 sparsity: {sparse} linear-layer GEMMs on sparse Tensor Cores (half the "
            "multiply-adds, each weight at half its values plus their indices)"
        )
    return lines


def _attention_backends(a) -> str:
    """The fused attention kernels chosen, with why (from the rows' notes)."""
    found = {}
    for r in a.rows:
        if r.family == "attention" and r.phase == "forward":
            note = next((n for n in r.notes if n.startswith("attention: ")), "")
            note = note.removeprefix("attention: ")
            if note:
                found[note] = found.get(note, 0) + 1
    return "; ".join(f"{note} (x{n})" for note, n in found.items())


def _top_ops(a, top: int) -> Table:
    step = a.step_time_s
    table = Table(title=f"top {top} ops by predicted time")
    for col in ("module", "op", "phase", "shapes", "dtype", "bound", "time", "%", "losses"):
        table.add_column(col, overflow="fold")
    for r in a.top(top):
        table.add_row(
            r.module or "(model)",
            short_op(r.op),
            PHASE.get(r.phase, r.phase),
            shapes_text(r.shapes, 2),
            r.dtype,
            r.bound,
            seconds(r.time_s),
            f"{r.time_s / step:.1%}" if step else "",
            losses_text(r),
        )
    return table


def losses_text(row) -> str:
    """The row's efficiency losses in a few words, read from its loss records:
    per GEMM its tile, wave and alignment losses, then the NCHW layout."""
    found = []
    if row.bound != "memory":  # quantization cannot matter to a kernel waiting on memory
        for index in range(len(row.gemms)):
            found += _gemm_losses([loss for loss in row.losses if loss.gemm == index])
    if any(loss.kind == LossKind.LAYOUT for loss in row.losses):
        found.append("NCHW")
    if any(note.startswith("persistent") for note in row.notes):  # a remark, not a loss
        found.append("persistent RNN ok")
    if not row.supported:
        found.append("UNSUPPORTED (priced as memory-bound)")
    return "; ".join(dict.fromkeys(found))


def _gemm_losses(losses) -> list[str]:
    words = []
    for loss in losses:
        if loss.kind == LossKind.TILE:
            words.append(f"tile {loss.efficiency:.0%}")
        elif loss.kind == LossKind.WAVE and loss.waves > 1:
            words.append(f"wave {loss.efficiency:.0%}")
        elif loss.kind == LossKind.WAVE:
            words.append(f"fills {loss.efficiency:.0%} of SMs")
    misaligned = [loss.dim.upper() for loss in losses if loss.kind == LossKind.ALIGNMENT]
    if misaligned:
        words.append(f"align {'/'.join(misaligned)}")
    return words


def _categories(a) -> Table:
    totals = a.totals
    table = Table(title="by category (the guides' % FLOP vs % runtime)")
    for col in ("category", "% FLOP", "% time", "time"):
        table.add_column(col, justify="right" if col != "category" else "left")
    for name, c in a.categories.items():
        if not c["flops"] and not c["time_s"]:
            continue
        table.add_row(
            name,
            f"{c['flops'] / max(totals['flops'], 1):.2%}",
            f"{c['time_s'] / max(totals['time_s'], 1e-30):.1%}",
            seconds(c["time_s"]),
        )
    return table


def _phases(a) -> Table:
    step = a.totals["time_s"]
    table = Table(title="by phase")
    for col in ("phase", "FLOPs", "time", "% time"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for name, p in a.phases.items():
        table.add_row(
            name,
            si(p["flops"], "FLOP"),
            seconds(p["time_s"]),
            f"{p['time_s'] / max(step, 1e-30):.1%}",
        )
    return table


def _modules(a, depth: int) -> Table:
    table = Table(
        title=f"by module (top-level modules, then their slowest sub-modules to depth {depth})"
    )
    for col in ("module", "ops", "time", "% of step", "% of parent"):
        table.add_column(col, justify="right" if col != "module" else "left")
    for line in module_tree(a, depth):
        table.add_row(
            "  " * (line.level - 1) + escape(line.path),
            str(line.ops),
            seconds(line.time_s),
            f"{line.share_of_step:.1%}" if line.level == 1 else "",
            f"{line.share_of_parent:.1%}" if line.level > 1 else "",
        )
    return table
