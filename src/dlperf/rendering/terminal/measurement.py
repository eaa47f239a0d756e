"""`dlperf trace`, `dlperf measure` and `dlperf calibrate`: what ran for real."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import PHASE, beside_table, seconds, shapes_text, short_op, si, wide_console


def trace_report(r, top: int = 15, console: Console | None = None) -> None:
    console = console or wide_console()
    idle = r.gpu_idle_s / max(r.gpu_busy_s + r.gpu_idle_s, 1e-30)
    console.print(
        f"[bold]{escape(r.path)}[/] on [bold]{r.gpu}[/]: {r.kernels:,} kernels in {r.steps} "
        f"step(s); GPU busy {seconds(r.gpu_busy_s)}, idle {seconds(r.gpu_idle_s)} ({idle:.0%})"
    )
    console.print(
        f"Tensor Core kernels: {r.tensor_core_kernels:,}; contraction kernels that "
        f"could use Tensor Cores but do not: {r.eligible_not_tensor_core_kernels:,}"
    )
    kernel_time = sum(row.time_s for row in r.rows) + r.unpriced_time_s
    if r.rows:
        console.print(_offenders(r.rows[:top], len(r.rows), kernel_time))
    else:
        console.print(
            "[yellow]no kernel could be priced on the roofline[/]: profile with "
            "record_shapes=True so that each op records its input shapes"
        )
    if r.unpriced:
        console.print(_unpriced(r.unpriced[:top], r, kernel_time))


TRACE_COLUMNS = ("op", "shapes", "dtype", "calls", "time", "% kernel", "roofline", "of roofline")
TRACE_COLUMNS += ("achieved", "predicted", "TC")


def _offenders(rows, count: int, kernel_time: float) -> Table:
    table = Table(
        title=f"top offenders: kernel time above the roofline ({len(rows)} of {count} "
        "groups of calls with the same op and input shapes)"
    )
    for col in TRACE_COLUMNS:
        table.add_column(col, overflow="fold")
    for row in rows:
        # a memory-bound op is better judged by its bandwidth than its FLOP rate
        if row.flops and row.flops / row.bytes >= 1:
            achieved = si(row.achieved_flops_per_s, "FLOP/s")
        else:
            achieved = si(row.achieved_bytes_per_s, "B/s")
        table.add_row(
            escape(row.op),
            shapes_text(row.shapes, 2),
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
    return table


def _unpriced(unpriced, r, kernel_time: float) -> Table:
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
    return table


def measure_report(r, console: Console | None = None) -> None:
    console = console or wide_console()
    console.print(
        f"[bold]{escape(r.model)}[/] on {r.device} ({r.precision}, "
        f"{f'training with {r.optimizer}' if r.training else 'inference'}): predicted "
        f"{seconds(r.predicted_time_s)}, measured {seconds(r.measured_time_s)} "
        f"(spread {seconds(r.measured_spread_s)}), error {r.error:+.0%}"
    )
    console.print(_measured_categories(r))
    console.print(_measured_ops(r))
    if r.tensor_core_kernels:
        console.print(tensor_core_line(r.tensor_core_kernels))


def tensor_core_line(tc: dict) -> str:
    """The measured step's kernels on Tensor Cores, GEMMs and convolutions, and
    fused attention where it ran."""
    line = (
        f"Tensor Cores: {tc['tensor_core_kernels']:,} of {tc['gemm_kernels']:,} "
        "GEMM/convolution kernels"
    )
    if tc.get("attention_kernels"):
        line += (
            f", {tc['attention_tensor_core_kernels']:,} of {tc['attention_kernels']:,} "
            "attention kernels"
        )
    return line


def _measured_categories(r) -> Table:
    entries = (
        (name, c["predicted_time_s"], c["measured_time_s"]) for name, c in r.categories.items()
    )
    return beside_table("by category (matched ops)", "category", entries)


def _measured_ops(r) -> Table:
    matched = [o for o in r.ops if o["measured_time_s"]]
    table = Table(title=f"slowest measured ops ({len(matched)} of {len(r.ops)} matched)")
    for col in ("module", "op", "phase", "predicted", "measured"):
        table.add_column(col)
    for o in sorted(matched, key=lambda o: o["measured_time_s"], reverse=True)[:12]:
        table.add_row(
            o["module"],
            short_op(o["op"]),
            PHASE.get(o["phase"], o["phase"]),
            seconds(o["predicted_time_s"]),
            seconds(o["measured_time_s"]),
        )
    return table


def calibration_document(spec, out: str) -> dict:
    """What `dlperf calibrate` wrote: the file, the spec's summary and its fitted figures."""
    fitted = ("kernel_latency_s", "saturation_bytes_per_sm", "stream_gap_s")
    return {
        "out": out,
        "spec": spec.summary(),
        "efficiency": {k: getattr(spec.efficiency, k) for k in fitted},
        "calibration": spec.calibration.to_dict() if spec.calibration else None,
    }


def calibration_report(doc: dict) -> None:
    name = doc["spec"]["name"]
    sys.stdout.write(f"wrote {doc['out']}: {name}; use it as --gpu {doc['out']}\n")
    c = doc["calibration"]
    if c:
        scales = ", ".join(f"{k} x{v:.2f}" for k, v in c["scales"].items())
        residuals = ", ".join(f"{k} {v:.0%}" for k, v in c["residuals"].items())
        sys.stdout.write(
            f"fitted: {', '.join(c['fitted'])}\nscales: {scales or '-'}; residual |error| per "
            f"class after the fit: {residuals or '-'}\n"
        )
        for why in c["kept"]:
            sys.stdout.write(f"kept the catalogue's value: {why}\n")
        for note in c.get("notes", ()):
            sys.stdout.write(f"note: {note}\n")
        sys.stdout.write(f"details: dlperf gpus --spec {doc['out']}\n")
