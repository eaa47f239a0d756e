"""Terminal rendering with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from .modules import module_tree


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def _tflops(spec, dtype: str) -> str:
    if dtype not in spec.math:
        return "-"
    value = spec.math[dtype].peak_flops_per_s / 1e12
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# The catalogue's columns, left to right; units live in the title so cells stay short.
GPU_COLUMNS = {
    "id": lambda s: s.id,
    "SMs": lambda s: str(s.sm_count),
    "GiB": lambda s: f"{s.memory_bytes / 2**30:.0f}",
    "GB/s": lambda s: f"{s.memory_bandwidth_bytes_per_s / 1e9:,.0f}",
    **{d: (lambda s, d=d: _tflops(s, d)) for d in ("fp32", "tf32", "fp16", "bf16", "int8")},
    "name": lambda s: s.name,
}
# Which columns a narrow terminal loses first; the id is never dropped or cut.
GPU_DROP_ORDER = ("name", "int8", "tf32", "SMs", "bf16", "GB/s", "fp32", "GiB", "fp16")


def _gpu_table(specs, columns: list[str], dropped: bool) -> Table:
    table = Table(
        title="GPU catalogue: memory in GiB, bandwidth in GB/s, dense peaks in TFLOP/s",
        caption="more columns in a wider terminal, all with --json" if dropped else None,
    )
    for col in columns:
        wide = col == "id"
        table.add_column(
            col,
            justify="left" if col in ("id", "name") else "right",
            no_wrap=wide,
            min_width=max(len(s.id) for s in specs) if wide and specs else None,
        )
    for s in specs:
        table.add_row(*(GPU_COLUMNS[col](s) for col in columns))
    return table


def gpus_table(specs, console: Console | None = None) -> None:
    """The catalogue as a table that fits the terminal: columns go, ids stay whole."""
    console = console or Console(emoji=False)
    columns, drops = list(GPU_COLUMNS), list(GPU_DROP_ORDER)
    table = _gpu_table(specs, columns, dropped=False)
    unbounded = console.options.update_width(10_000)  # measure the table's natural width
    while drops and Measurement.get(console, unbounded, table).maximum > console.width:
        columns.remove(drops.pop(0))
        table = _gpu_table(specs, columns, dropped=True)
    console.print(table)


def gemm_report(r, console: Console | None = None) -> None:
    console = console or Console(emoji=False)
    batch = f" x {r.batch}" if r.batch > 1 else ""
    console.print(f"[bold]GEMM {r.m} x {r.n} x {r.k}{batch}[/] ({r.dtype}) on [bold]{r.gpu}[/]")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    rows = [
        ("FLOPs", _si(r.flops, "FLOP")),
        ("bytes", _si(r.bytes, "B")),
        ("arithmetic intensity", f"{r.arithmetic_intensity:.1f} FLOPs/B"),
        ("ridge point", f"{r.ridge_ops_per_byte:.1f} FLOPs/B"),
        ("bound", r.bound),
        ("predicted time", seconds(r.time_s)),
        ("achieved", f"{_si(r.achieved_flops_per_s, 'FLOP/s')} ({r.fraction_of_peak:.0%} of peak)"),
        ("Tensor Cores", "yes" if r.tensor_cores else "no"),
        ("tile", f"{r.tile}, {r.tiles} tiles, {r.waves} wave(s), split-K {r.split_k}"),
        ("tile efficiency", f"{r.tile_efficiency:.0%}"),
        ("wave efficiency", f"{r.wave_efficiency:.0%}"),
        ("alignment", ", ".join(f"{d.upper()} {v}" for d, v in r.alignment.items())),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    for note in r.notes:
        console.print(f"  - {note}")


def _short_op(op: str) -> str:
    name = op.split(".")[1] if op.startswith("aten.") else op
    return name


def _shapes_text(shapes, limit: int = 3) -> str:
    parts = ["x".join(str(s) for s in shape) or "scalar" for shape in shapes[:limit]]
    return ", ".join(parts) + (", ..." if len(shapes) > limit else "")


def _losses(row) -> str:
    found = []
    for g in row.gemms:
        if row.bound == "memory":
            break  # quantization cannot matter to a kernel waiting on memory
        if g.tile_efficiency < 0.9:
            found.append(f"tile {g.tile_efficiency:.0%}")
        if g.waves > 1 and g.wave_efficiency < 0.75:
            found.append(f"wave {g.wave_efficiency:.0%}")
        elif g.waves == 1 and g.wave_efficiency < 0.5:
            found.append(f"fills {g.wave_efficiency:.0%} of SMs")
        bad = [d.upper() for d, v in g.alignment.items() if v != "ok"]
        if bad:
            found.append(f"align {'/'.join(bad)}")
    for note in row.notes:
        if note.startswith("NCHW"):
            found.append("NCHW")
        elif note.startswith("persistent"):
            found.append("persistent RNN ok")
    if not row.supported:
        found.append("UNSUPPORTED (priced as memory-bound)")
    return "; ".join(dict.fromkeys(found))


def _wide_console() -> Console:
    """A console at least 140 columns wide when the output is not a terminal."""
    console = Console(emoji=False)
    if not console.is_terminal:
        console = Console(width=140, emoji=False)
    return console


_PHASE = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def analysis_report(a, top: int = 15, depth: int = 2, console: Console | None = None) -> None:
    console = console or _wide_console()
    totals = a.totals
    mode = "training step" if a.training else "inference step"
    console.print(
        f"[bold]{escape(a.model)}[/] on [bold]{a.gpu}[/], {a.precision}, {mode}: "
        f"{a.params / 1e6:,.1f} M parameters, batch {a.batch}"
    )
    tput = a.throughput
    rate = f"{tput.get('samples_per_s', 0):,.1f} samples/s"
    if "tokens_per_s" in tput:
        rate += f", {tput['tokens_per_s']:,.0f} tokens/s"
    console.print(
        f"predicted step time [bold]{seconds(totals['time_s'])}[/] ({rate}); "
        f"{_si(totals['flops'], 'FLOP')}, {_si(totals['bytes'], 'B')} moved, "
        f"{totals['kernels']} kernels; MFU {a.mfu:.0%}"
    )

    table = Table(title=f"top {top} ops by predicted time")
    for col in ("module", "op", "phase", "shapes", "dtype", "bound", "time", "%", "losses"):
        table.add_column(col, overflow="fold")
    for r in a.top(top):
        table.add_row(
            r.module or "(model)",
            _short_op(r.op),
            _PHASE.get(r.phase, r.phase),
            _shapes_text(r.shapes, 2),
            r.dtype,
            r.bound,
            seconds(r.time_s),
            f"{r.time_s / totals['time_s']:.1%}" if totals["time_s"] else "",
            _losses(r),
        )
    console.print(table)

    cats = Table(title="by category (the guides' % FLOP vs % runtime)")
    for col in ("category", "% FLOP", "% time", "time"):
        cats.add_column(col, justify="right" if col != "category" else "left")
    for name, c in a.categories.items():
        if not c["flops"] and not c["time_s"]:
            continue
        cats.add_row(
            name,
            f"{c['flops'] / max(totals['flops'], 1):.2%}",
            f"{c['time_s'] / max(totals['time_s'], 1e-30):.1%}",
            seconds(c["time_s"]),
        )
    console.print(cats)

    phases = Table(title="by phase")
    for col in ("phase", "FLOPs", "time", "% time"):
        phases.add_column(col, justify="right" if col != "phase" else "left")
    for name, p in a.phases.items():
        phases.add_row(
            name,
            _si(p["flops"], "FLOP"),
            seconds(p["time_s"]),
            f"{p['time_s'] / max(totals['time_s'], 1e-30):.1%}",
        )
    console.print(phases)

    modules = Table(
        title=f"by module (top-level modules, then their slowest sub-modules to depth {depth})"
    )
    for col in ("module", "ops", "time", "% of step", "% of parent"):
        modules.add_column(col, justify="right" if col != "module" else "left")
    for line in module_tree(a, depth):
        modules.add_row(
            "  " * (line.level - 1) + escape(line.path),
            str(line.ops),
            seconds(line.time_s),
            f"{line.share_of_step:.1%}" if line.level == 1 else "",
            f"{line.share_of_parent:.1%}" if line.level > 1 else "",
        )
    console.print(modules)

    if a.unsupported_ops:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(a.unsupported_ops.items()))
        console.print(
            f"[yellow]unsupported ops (priced as memory-bound on their tensors):[/] {listed}"
        )


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def memory_report(r, console: Console | None = None) -> None:
    console = console or _wide_console()
    micro = f", micro-batch {r.micro_batch} x {r.accumulate}" if r.accumulate > 1 else ""
    console.print(
        f"[bold]{escape(r.model)}[/] training on [bold]{r.gpu}[/], {r.precision}, {r.optimizer}, "
        f"checkpoint {r.checkpoint}: batch {r.batch}{micro}, {r.params / 1e6:,.1f} M parameters"
    )
    verdict = "[green]fits[/]" if r.fits else "[red]does not fit[/]"
    console.print(
        f"peak {gib(r.peak_bytes)} during {r.peak_phase} of {gib(r.capacity_bytes)}: {verdict}"
    )
    table = Table(title="breakdown")
    table.add_column("term")
    table.add_column("bytes", justify="right")
    table.add_column("per parameter", justify="right")
    for label, value in (
        ("weights", r.weights_bytes),
        ("gradients", r.gradients_bytes),
        ("optimizer states", r.optimizer_bytes),
        ("activations (saved for backward)", r.activations_bytes),
        ("largest backward transient", r.transient_bytes),
        ("overhead (context, workspace, allocator)", r.overhead_bytes),
    ):
        per = (
            f"{value / r.params:.1f} B"
            if r.params and label in ("weights", "gradients", "optimizer states")
            else ""
        )
        table.add_row(label, gib(value), per)
    console.print(table)
    if r.recompute_s:
        console.print(f"checkpointing recomputes {seconds(r.recompute_s)} of forward per step")
    what_if = Table(title="checkpointing what-ifs")
    for col in ("checkpoint", "activations", "peak", "recompute", "fits"):
        what_if.add_column(col, justify="right" if col != "checkpoint" else "left")
    for p in r.policies:
        what_if.add_row(
            p["checkpoint"],
            gib(p["activations_bytes"]),
            gib(p["peak_bytes"]),
            seconds(p["recompute_s"]),
            "yes" if p["fits"] else "no",
        )
    console.print(what_if)
    mods = Table(title="activations by module (top 12)")
    mods.add_column("module")
    mods.add_column("saved", justify="right")
    for name, value in list(r.by_module.items())[:12]:
        mods.add_row(name, gib(value))
    console.print(mods)
    if r.max_batch == 0:  # the search found no batch at all
        console.print("[red]does not fit even at batch 1[/]")
    elif r.max_batch is not None:
        console.print(f"largest batch that fits: {r.max_batch}")
    if r.max_seq_len == 0:  # the sequence search starts at 64 tokens (api.memory)
        console.print("[red]no sequence length of 64 tokens or more fits at this batch[/]")
    elif r.max_seq_len is not None:
        console.print(f"largest sequence length that fits at this batch: {r.max_seq_len}")


def plan_report(r, top: int = 12, console: Console | None = None) -> None:
    console = console or _wide_console()
    console.print(
        f"[bold]{escape(r.model)}[/] on {r.gpus} x [bold]{r.gpu}[/] ({r.gpus_per_node} per node), "
        f"{r.precision}: global batch {r.global_batch}, micro-batch {r.micro_batch}, "
        f"{r.params / 1e9:,.2f} B parameters"
    )
    fitting = sum(p.fits for p in r.plans)
    console.print(f"{fitting} of {len(r.plans)} plans fit in memory; best first")
    table = Table()
    for col in (
        "plan",
        "micro-batches",
        "memory/GPU",
        "fits",
        "compute",
        "comm (exposed)",
        "step",
        "throughput",
    ):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for p in r.plans[:top]:
        rate = (
            f"{p.tokens_per_s:,.0f} tok/s"
            if p.tokens_per_s
            else f"{p.samples_per_s:,.1f} samples/s"
        )
        table.add_row(
            p.name,
            str(p.accumulate),
            gib(p.memory_per_gpu_bytes),
            "yes" if p.fits else "[red]no[/]",
            seconds(p.compute_time_s),
            f"{seconds(p.comm_time_s)} ({seconds(p.exposed_comm_s)})",
            seconds(p.step_time_s),
            rate,
        )
    console.print(table)
    best = r.plans[0]
    if best.collectives:
        parts = ", ".join(
            f"{name} {gib(c['bytes'])} in {seconds(c['time_s'])}"
            for name, c in best.collectives.items()
        )
        console.print(f"collectives per step of {best.name}: {parts}")


def comm_report(result: dict, console: Console | None = None) -> None:
    console = console or _wide_console()
    console.print(f"collectives over {result['world']} ranks ({result['backend']})")
    table = Table()
    for col in ("collective", "bytes", "median time", "bus bandwidth"):
        table.add_column(col, justify="left" if col == "collective" else "right")
    for c in result["collectives"]:
        table.add_row(
            c["op"],
            _si(c["bytes"], "B"),
            seconds(c["time_s"]),
            _si(c["bus_bandwidth_bytes_per_s"], "B/s"),
        )
    console.print(table)
    for op, why in result.get("skipped", {}).items():
        console.print(f"[yellow]{op} skipped:[/] {why}")
    fit = result.get("interconnect") or {}
    if fit.get("bandwidth_bytes_per_s"):
        console.print(
            f"fit: {_si(fit['bandwidth_bytes_per_s'], 'B/s')} per link, "
            f"{seconds(fit['latency_s'])} per ring step"
        )


def rules_table(rules, console: Console | None = None) -> None:
    console = console or _wide_console()
    table = Table(title="rules")
    for col in ("rule", "what it finds", "source", "automatic fix"):
        table.add_column(col)
    for r in rules:
        table.add_row(r.id, r.title, r.source, "yes" if r.fix else "")
    console.print(table)


def advice_report(a, console: Console | None = None) -> None:
    console = console or _wide_console()
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


def trace_report(r, top: int = 15, console: Console | None = None) -> None:
    console = console or _wide_console()
    console.print(
        f"[bold]{escape(r.path)}[/] on [bold]{r.gpu}[/]: {r.kernels:,} kernels in {r.steps} "
        f"step(s); GPU busy {seconds(r.gpu_busy_s)}, idle {seconds(r.gpu_idle_s)} "
        f"({r.gpu_idle_s / max(r.gpu_busy_s + r.gpu_idle_s, 1e-30):.0%})"
    )
    console.print(
        f"Tensor Core kernels: {r.tensor_core_kernels:,}; contraction kernels that "
        f"could use Tensor Cores but do not: {r.eligible_not_tensor_core_kernels:,}"
    )
    kernel_time = sum(row.time_s for row in r.rows) + r.unpriced_time_s
    if r.rows:
        _trace_offenders(r.rows[:top], len(r.rows), kernel_time, console)
    else:
        console.print(
            "[yellow]no kernel could be priced on the roofline[/]: profile with "
            "record_shapes=True so that each op records its input shapes"
        )
    if r.unpriced:
        _trace_unpriced(r.unpriced[:top], r, kernel_time, console)


def _trace_offenders(rows, count: int, kernel_time: float, console: Console) -> None:
    table = Table(
        title=f"top offenders: kernel time above the roofline ({len(rows)} of {count} "
        "groups of calls with the same op and input shapes)"
    )
    for col in ("op", "shapes", "dtype", "calls", "time", "% kernel", "roofline", "of roofline"):
        table.add_column(col, overflow="fold")
    for col in ("achieved", "predicted", "TC"):
        table.add_column(col, overflow="fold")
    for row in rows:
        # a memory-bound op is better judged by its bandwidth than its FLOP rate
        if row.flops and row.flops / row.bytes >= 1:
            achieved = _si(row.achieved_flops_per_s, "FLOP/s")
        else:
            achieved = _si(row.achieved_bytes_per_s, "B/s")
        table.add_row(
            escape(row.op),
            _shapes_text(row.shapes, 2),
            "/".join(dict.fromkeys(row.dtypes)),
            f"{row.calls:,}",
            seconds(row.time_s),
            f"{row.time_s / max(kernel_time, 1e-30):.1%}",
            seconds(row.roofline_time_s),
            f"{row.fraction_of_roofline:.0%}",
            achieved,
            seconds(row.predicted_time_s),
            "yes" if row.tensor_cores else "",
        )
    console.print(table)


def _trace_unpriced(unpriced, r, kernel_time: float, console: Console) -> None:
    rest = len(r.unpriced) - len(unpriced)
    table = Table(
        title=f"not priced: {seconds(r.unpriced_time_s)} of kernel time "
        f"({r.unpriced_time_s / max(kernel_time, 1e-30):.0%}) in {len(r.unpriced)} op(s) "
        "with no roofline figure" + (f"; the {rest} smallest not shown" if rest > 0 else "")
    )
    for col in ("op", "why", "calls", "kernels", "time", "% kernel", "longest kernel"):
        table.add_column(col, overflow="fold")
    for u in unpriced:
        table.add_row(
            escape(u.op),
            u.why,
            f"{u.calls:,}",
            f"{u.kernels:,}",
            seconds(u.time_s),
            f"{u.time_s / max(kernel_time, 1e-30):.1%}",
            escape(u.kernel.removeprefix("void ")[:48]),
        )
    console.print(table)


def measure_report(r, console: Console | None = None) -> None:
    console = console or _wide_console()
    console.print(
        f"[bold]{escape(r.model)}[/] on {r.device} ({r.precision}, "
        f"{'training' if r.training else 'inference'}): predicted "
        f"{seconds(r.predicted_time_s)}, measured {seconds(r.measured_time_s)} "
        f"(spread {seconds(r.measured_spread_s)}), error {r.error:+.0%}"
    )
    cats = Table(title="by category (matched ops)")
    for col in ("category", "predicted", "measured", "error"):
        cats.add_column(col, justify="left" if col == "category" else "right")
    for name, c in r.categories.items():
        err = (
            (c["predicted_time_s"] - c["measured_time_s"]) / c["measured_time_s"]
            if c["measured_time_s"]
            else 0.0
        )
        cats.add_row(
            name, seconds(c["predicted_time_s"]), seconds(c["measured_time_s"]), f"{err:+.0%}"
        )
    console.print(cats)
    matched = [o for o in r.ops if o["measured_time_s"]]
    table = Table(title=f"slowest measured ops ({len(matched)} of {len(r.ops)} matched)")
    for col in ("module", "op", "phase", "predicted", "measured"):
        table.add_column(col)
    for o in sorted(matched, key=lambda o: o["measured_time_s"], reverse=True)[:12]:
        table.add_row(
            o["module"],
            _short_op(o["op"]),
            _PHASE.get(o["phase"], o["phase"]),
            seconds(o["predicted_time_s"]),
            seconds(o["measured_time_s"]),
        )
    console.print(table)
    if r.tensor_core_kernels:
        tc = r.tensor_core_kernels
        console.print(
            f"Tensor Cores: {tc['tensor_core_kernels']} of {tc['gemm_kernels']} "
            "GEMM/convolution kernels"
        )
