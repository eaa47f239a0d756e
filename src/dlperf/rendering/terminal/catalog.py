"""The GPU catalogue and one GEMM."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from .format import seconds, si, wide_console


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
    console = console or wide_console()
    columns, drops = list(GPU_COLUMNS), list(GPU_DROP_ORDER)
    table = _gpu_table(specs, columns, dropped=False)
    unbounded = console.options.update_width(10_000)  # measure the table's natural width
    while drops and Measurement.get(console, unbounded, table).maximum > console.width:
        columns.remove(drops.pop(0))
        table = _gpu_table(specs, columns, dropped=True)
    console.print(table)


def gpus_document(specs) -> dict:
    return {"gpus": [s.summary() for s in specs]}


def spec_document(spec) -> dict:
    """One spec file as `dlperf gpus --spec` shows it: its facts, constants and
    what a trace calibrated."""
    return {"spec": spec.to_dict()}


def spec_report(spec, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(_gpu_table([spec], list(GPU_COLUMNS), dropped=False))
    c = spec.calibration
    if c is None:
        console.print(f"{escape(spec.path)}: no \\[calibration] table (not fitted from a trace)")
        return
    console.print(
        f"calibrated on [bold]{escape(c.source)}[/] (model {escape(c.model)}), extending {c.base}"
    )
    table = Table(title="fitted from the trace")
    for col in ("constant", "value", "residual |error| after the fit"):
        table.add_column(col)
    for kind, scale in c.scales.items():
        residual = c.residuals.get(kind)
        table.add_row(f"scales.{kind}", f"{scale:.3f}", f"{residual:.1%}" if residual else "")
    if "gemm_exponent" in c.fitted:
        table.add_row("gemm_exponent", f"{c.gemm_exponent:+.3f}", "")
    for op, scale in sorted(c.op_scales.items()):
        table.add_row(f"op_scales.{escape(op)}", f"{scale:.3f}", "")
    table.add_row("kernel_extra_s", seconds(c.kernel_extra_s), "")
    if "host_gap_s" in c.fitted:
        table.add_row("host_gap_s", seconds(c.host_gap_s), "")
    if "efficiency.stream_gap_s" in c.fitted:
        table.add_row("efficiency.stream_gap_s", seconds(spec.efficiency.stream_gap_s), "")
    console.print(table)
    for why in c.kept:
        console.print(f"kept the catalogue's value: {escape(why)}")
    for note in c.notes:
        console.print(f"note: {escape(note)}")


def gemm_report(r, console: Console | None = None) -> None:
    console = console or wide_console()
    batch = f" x {r.batch}" if r.batch > 1 else ""
    console.print(f"[bold]GEMM {r.m} x {r.n} x {r.k}{batch}[/] ({r.dtype}) on [bold]{r.gpu}[/]")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column()
    rows = [
        ("FLOPs", si(r.flops, "FLOP")),
        ("bytes", si(r.bytes, "B")),
        ("arithmetic intensity", f"{r.arithmetic_intensity:.1f} FLOPs/B"),
        ("ridge point", f"{r.ridge_ops_per_byte:.1f} FLOPs/B"),
        ("bound", r.bound),
        ("predicted time", seconds(r.time_s)),
        ("achieved", f"{si(r.achieved_flops_per_s, 'FLOP/s')} ({r.fraction_of_peak:.0%} of peak)"),
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
