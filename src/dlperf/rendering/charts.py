"""The report's charts: matplotlib SVG drawn inline (no CDN, no script);
hovering a roofline point shows its op. Also the grouping of identical ops
(the same kernel in every layer) that the roofline and the GEMM table share."""

from __future__ import annotations

import html
import io
import re

from ..errors import DlperfError

# Op categories in colours no roof line uses (the roofs are drawn in greys).
CATEGORY_COLORS = {
    "contraction": "#1f77b4",
    "normalization": "#ff7f0e",
    "elementwise": "#2ca02c",
    "other": "#d62728",
}
ROOF_STYLES = ("-", "--", "-.", ":")
MAX_POINTS = 2000  # roofline points drawn (the slowest groups of ops)


def svg(fig) -> str:
    """The figure as an inline <svg> element; the figure is closed."""
    buffer = io.StringIO()
    import matplotlib
    import matplotlib.pyplot as plt

    # text as <text> elements, not glyph outlines: a smaller page, selectable
    # labels, and a third of the drawing time
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight")

    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def figure(width=7.0, height=4.0):
    """(figure, axes) drawn off screen; a one-line error without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise DlperfError("charts need matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def module_pattern(paths: list[str]) -> str:
    """One label for the same op in many modules: the parts that differ become
    `*` (`layers.*.mlp.up_proj` for 32 decoder layers)."""
    paths = list(dict.fromkeys(p or "(model)" for p in paths))
    if len(paths) == 1:
        return paths[0]
    split = [p.split(".") for p in paths]
    if len({len(parts) for parts in split}) > 1:
        return f"{paths[0]} and {len(paths) - 1} more"
    return ".".join(parts[0] if len(set(parts)) == 1 else "*" for parts in zip(*split, strict=True))


def op_groups(rows) -> list[list]:
    """Ops with the same op, phase, shapes and dtype (the same kernel in every
    layer), slowest group first."""
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r.op, r.phase, str(r.shapes), r.dtype, r.category)
        groups.setdefault(key, []).append(r)
    return sorted(groups.values(), key=lambda g: sum(r.time_s for r in g), reverse=True)


def roofline_svg(analysis) -> str:
    """One point per group of identical ops (area: its share of the step)
    under the roof of every dtype the GPU computes in."""
    import numpy as np

    spec = analysis.spec
    fig, ax = figure(9, 5.5)
    timed = [r for r in analysis.rows if r.flops > 0 and r.bytes > 0 and r.time_s > 0]
    groups = op_groups(timed)[:MAX_POINTS]
    bandwidth = spec.memory_bandwidth_bytes_per_s
    xs = np.array([g[0].arithmetic_intensity for g in groups] or [1.0])
    ys = np.array([g[0].flops / g[0].time_s for g in groups] or [1.0])
    ridges = [u.peak_flops_per_s / bandwidth for u in spec.math.values()]
    peak = max(u.peak_flops_per_s for u in spec.math.values())
    # The axes span the points and the ridges, not a fixed range: points spread out.
    lo, hi = min(xs.min(), *ridges) / 3, max(xs.max(), *ridges) * 3
    roofs = _roofs(ax, spec, np.logspace(np.log10(lo), np.log10(hi), 200))
    total = max(analysis.time_s, 1e-30)
    times = [sum(r.time_s for r in g) for g in groups]
    points = ax.scatter(
        xs[: len(groups)],
        ys[: len(groups)],
        s=[max(6.0, 3000 * t / total) for t in times],
        c=[CATEGORY_COLORS.get(g[0].category, "#000") for g in groups],
        alpha=0.6,
        edgecolors="#333",
        linewidths=0.3,
    )
    points.set_gid("roofline-points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(ys.min(), peak) / 3, peak * 2)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("achieved FLOP/s (predicted)")
    ax.set_title(
        f"roofline of {spec.id}: one point per op and shape, area = its share of the step",
        fontsize=10,
    )
    _legends(ax, {g[0].category for g in groups}, roofs)
    return _add_titles(svg(fig), "roofline-points", _point_titles(groups, times))


def _roofs(ax, spec, grid) -> list:
    """A grey roof per dtype, in its own line style: the lines for the legend."""
    import numpy as np

    bandwidth = spec.memory_bandwidth_bytes_per_s
    lines = []
    for i, (dtype, unit) in enumerate(spec.math.items()):
        shade = 0.15 + 0.45 * i / max(1, len(spec.math) - 1)
        (line,) = ax.plot(
            grid,
            np.minimum(unit.peak_flops_per_s, grid * bandwidth),
            lw=1,
            color=str(shade),
            ls=ROOF_STYLES[i % len(ROOF_STYLES)],
            label=f"{dtype} roof (ridge {unit.peak_flops_per_s / bandwidth:.0f})",
        )
        lines.append(line)
    return lines


def _legends(ax, shown: set, roofs: list) -> None:
    """The op colours and the roofs, beside the axes: inside, they would hide points."""
    from matplotlib.lines import Line2D

    markers = [
        Line2D([], [], ls="", marker="o", color=color, alpha=0.7, label=name)
        for name, color in CATEGORY_COLORS.items()
        if name in shown
    ]
    ops = ax.legend(
        handles=markers, fontsize=7, title="ops", loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    ax.add_artist(ops)
    ax.legend(handles=roofs, fontsize=7, title="roofs", loc="lower left", bbox_to_anchor=(1.01, 0))


def _point_titles(groups, times) -> list[str]:
    return [
        html.escape(
            f"{len(g)} x {module_pattern([r.module for r in g])} {g[0].op} {g[0].phase} "
            f"{g[0].shapes[:2]} {g[0].bound}-bound, {g[0].time_s * 1e6:.1f} us each, "
            f"{t * 1e3:.3f} ms in all"
        )
        for g, t in zip(groups, times, strict=True)
    ]


def _add_titles(svg_text: str, gid: str, titles: list[str]) -> str:
    """Give each point of a scatter a <title> (the browser's hover text)."""
    start = svg_text.find(f'id="{gid}"')
    if start < 0:
        return svg_text
    end = svg_text.find("</g>", start)
    group = svg_text[start:end]
    counter = iter(titles)

    def add(match):
        title = next(counter, None)
        if title is None:
            return match.group(0)
        return f"{match.group(1)}><title>{title}</title></{match.group(2)}>"

    group = re.sub(r"(<(use|path) [^>]*?)\s*/>", add, group, flags=re.DOTALL)
    return svg_text[:start] + group + svg_text[end:]


def category_svg(analysis) -> str:
    import numpy as np

    fig, ax = figure(6, 3.2)
    cats = {k: v for k, v in analysis.categories.items() if v["flops"] or v["time_s"]}
    names = list(cats)
    total_f = max(sum(c["flops"] for c in cats.values()), 1)
    total_t = max(sum(c["time_s"] for c in cats.values()), 1e-30)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [100 * cats[n]["flops"] / total_f for n in names], 0.4, label="% FLOP")
    ax.bar(x + 0.2, [100 * cats[n]["time_s"] / total_t for n in names], 0.4, label="% time")
    ax.set_xticks(x, names)
    ax.set_ylabel("%")
    ax.set_title("% FLOP vs % runtime by category")
    ax.legend()
    return svg(fig)


def bars_svg(title: str, labels: list[str], values: list[float], unit: str) -> str:
    fig, ax = figure(7, max(2.0, 0.28 * len(labels) + 1))
    ax.barh(range(len(labels)), values, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    return svg(fig)


def scatter_svg(title, xs, ys, xlabel, ylabel) -> str:
    fig, ax = figure(5, 4)
    ax.scatter(xs, ys, s=10, alpha=0.6)
    lim = [min(xs + ys), max(xs + ys)]
    ax.plot(lim, lim, "k--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return svg(fig)


def lines_svg(
    title: str,
    xs: list[float],
    series: dict[str, list[float]],
    xlabel: str,
    ylabel: str,
    limit: tuple[float, str] | None = None,
    marks: dict[str, float] | None = None,
    log_y: bool = False,
) -> str:
    """Lines against a power-of-two x axis (one per series, gid `series-I`);
    `limit` (x, label): a red line (gid `limit`, its label as hover text) with
    the region beyond it shaded; `marks` label -> x: grey dotted lines."""
    fig, ax = figure(6, 3.6)
    for i, (label, ys) in enumerate(series.items()):
        ax.plot(xs, ys, marker="o", ms=3, lw=1.2, label=label, gid=f"series-{i}")
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(_plain_numbers())  # after the scales, which reset it
    ax.yaxis.set_major_formatter(_plain_numbers())
    right = max(xs) * 1.3  # the shaded region reaches the edge
    ax.set_xlim(min(xs) / 1.3, right)
    for label, x in (marks or {}).items():
        ax.axvline(x, color="#777", ls=":", lw=1, label=label)
    if limit is not None and limit[0] < right:
        x, label = limit
        ax.axvspan(x, right, color="#c00", alpha=0.08, lw=0)
        ax.axvline(x, color="#c00", ls="--", lw=1, label=label, gid="limit")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # off the lines
    text = svg(fig)
    return _add_titles(text, "limit", [html.escape(limit[1])]) if limit else text


def _plain_numbers():
    """Tick labels as numbers with thousands separators (1,024, not 2^10 or 1e6 offsets)."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
