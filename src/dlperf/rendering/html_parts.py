"""The HTML report's building blocks: tables, panels and rows, shared by its
sections (`html`, `html_serve`)."""

from __future__ import annotations

import html


class Raw(str):
    """A table cell that is already HTML (the renderer's own markup, never user text)."""


def cell(value) -> str:
    return value if isinstance(value, Raw) else html.escape(str(value))


def table(headers: list[str], rows: list[list], note: str = "", css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    head = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    extra = f"<p class='note'>{html.escape(note)}</p>" if note else ""
    cls = f" class='{css}'" if css else ""
    return f"<table{cls}>{head}<tbody>{body}</tbody></table>{extra}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def panel(*parts: str) -> str:
    return "<section class='panel'>" + "".join(parts) + "</section>"


def row(*panels: str, css: str = "row") -> str:
    return f"<div class='{css}'>" + "".join(panels) + "</div>"
