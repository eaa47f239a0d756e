"""Terminal rendering with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


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


def gpus_table(specs, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="GPU catalogue (dense peaks)")
    for col in ("id", "name", "SMs", "memory", "bandwidth", "fp32", "tf32", "fp16", "int8"):
        table.add_column(col, justify="right" if col not in ("id", "name") else "left")
    for s in specs:

        def peak(d, s=s):
            return _si(s.math[d].peak_flops_per_s, "FLOP/s") if d in s.math else "-"

        table.add_row(
            s.id,
            s.name,
            str(s.sm_count),
            f"{s.memory_bytes / 2**30:.0f} GiB",
            _si(s.memory_bandwidth_bytes_per_s, "B/s"),
            peak("fp32"),
            peak("tf32"),
            peak("fp16"),
            peak("int8"),
        )
    console.print(table)


def gemm_report(r, console: Console | None = None) -> None:
    console = console or Console()
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
