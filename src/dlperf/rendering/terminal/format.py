"""Numbers and labels as the terminal tables show them."""

from __future__ import annotations

import math

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


def sig(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, with thousands separators and never
    an exponent, trailing zeros dropped as `:g` drops them; a large number keeps
    its whole digits (2,115, not 2.12e+03) and a small one its leading zeros
    (0.00123, not 0.00)."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    rounded = float(f"{value:.{digits}g}")
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    if decimals <= 0:
        return f"{value:,.0f}"
    return f"{rounded:,.{decimals}f}".rstrip("0").rstrip(".")


# Durations past a minute in minutes, hours, then days (3.13e+03 s was unread).
_DURATIONS = ((86400, 2 * 86400, "days"), (3600, 3600, "h"), (60, 60, "min"), (1, 1, "s"))


def _duration_unit(value: float) -> tuple[float, str]:
    if value < 1:
        return (1e-3, "ms") if value >= 1e-3 else (1e-6, "us")
    return next((scale, unit) for scale, floor, unit in _DURATIONS if value >= floor)


def seconds(value: float) -> str:
    """A duration in the unit that suits it: us, ms, s, min, h or days, to 3
    significant digits."""
    scale, unit = _duration_unit(abs(value))
    return f"{sig(value / scale)} {unit}"


def durations(values) -> list[str]:
    """A column of durations in one unit, the one that suits its largest value
    (a column of runs read "3.41 h" beside "3.13e+03 s")."""
    values = list(values)
    scale, unit = _duration_unit(max((abs(v) for v in values), default=0.0))
    return [f"{sig(v / scale)} {unit}" for v in values]


def energy(joules: float) -> str:
    """Energy in J, Wh, kWh or MWh, to 3 significant digits (a short run was
    "0.00 kWh")."""
    wh = joules / 3600
    if wh < 1:
        return f"{sig(joules)} J"
    for scale, unit in ((1e6, "MWh"), (1e3, "kWh")):
        if wh >= scale:
            return f"{sig(wh / scale)} {unit}"
    return f"{sig(wh)} Wh"


def parameters(count: float) -> str:
    """A parameter count to 3 significant digits in B above a billion, M above a
    million, else k (DeepSeek-V3 read "671,026.4 M parameters")."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{sig(count / scale)} {unit} parameters"
    return f"{count:,.0f} parameters"


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
