"""Numbers and labels as the terminal tables show them."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Short phase names for narrow table columns.
PHASE = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def si(value: float, unit: str) -> str:
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


def gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def short_op(op: str) -> str:
    """`addmm` for `aten.addmm.default`; other names as they are."""
    return op.split(".")[1] if op.startswith("aten.") else op


def shapes_text(shapes, limit: int = 3) -> str:
    parts = ["x".join(str(s) for s in shape) or "scalar" for shape in shapes[:limit]]
    return ", ".join(parts) + (", ..." if len(shapes) > limit else "")


# Piped output is never cut: tables take their natural width, lines their length.
PIPED_WIDTH = 1000


class PipeConsole(Console):
    """A console whose reader may stop early (`dlperf ... | head`): rich's own
    answer is to exit with status 1; this raises BrokenPipeError instead, which
    the command ends on quietly with status 0 (`cli.main`)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def wide_console() -> Console:
    """The terminal's width on a terminal; PIPED_WIDTH when piped."""
    console = PipeConsole(emoji=False)
    if not console.is_terminal:
        console = PipeConsole(width=PIPED_WIDTH, emoji=False)
    return console


def relative_error(predicted: float, measured: float) -> str:
    """The prediction's error against a measurement, as a signed percentage."""
    return f"{(predicted - measured) / measured:+.0%}" if measured else "-"


def beside_table(title: str, label: str, entries) -> Table:
    """Predicted beside measured: `entries` are (name, predicted s, measured s)."""
    table = Table(title=title)
    for col in (label, "predicted", "measured", "error"):
        table.add_column(col, justify="left" if col == label else "right")
    for name, predicted, measured in entries:
        error = relative_error(predicted, measured)
        table.add_row(escape(str(name)), seconds(predicted), seconds(measured), error)
    return table
