"""A self-contained HTML report: summary, roofline, breakdowns, GEMM table,
memory, findings and measurements. Charts are matplotlib SVG drawn inline
(no CDN, no script); hovering a roofline point shows its op."""

from __future__ import annotations

import html
import io
import re

from .modules import module_tree

# Op categories in colours no roof line uses (the roofs are drawn in greys).
CATEGORY_COLORS = {
    "contraction": "#1f77b4",
    "normalization": "#ff7f0e",
    "elementwise": "#2ca02c",
    "other": "#d62728",
}
ROOF_STYLES = ("-", "--", "-.", ":")
MAX_POINTS = 2000  # roofline points drawn (the slowest groups of ops)
MAX_ROWS = 200  # rows per table


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure(width=7.0, height=4.0):
    try:
        import matplotlib
    except ImportError:
        from ..errors import DlperfError

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
    import numpy as np
    from matplotlib.lines import Line2D

    spec = analysis.spec
    fig, ax = _figure(9, 5.5)
    timed = [r for r in analysis.rows if r.flops > 0 and r.bytes > 0 and r.time_s > 0]
    groups = op_groups(timed)[:MAX_POINTS]
    bandwidth = spec.memory_bandwidth_bytes_per_s
    xs = np.array([g[0].arithmetic_intensity for g in groups] or [1.0])
    ys = np.array([g[0].flops / g[0].time_s for g in groups] or [1.0])
    ridges = [u.peak_flops_per_s / bandwidth for u in spec.math.values()]
    peak = max(u.peak_flops_per_s for u in spec.math.values())
    # The axes span the points and the ridges, not a fixed range: points spread out.
    lo, hi = min(xs.min(), *ridges) / 3, max(xs.max(), *ridges) * 3
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    roofs = []
    for i, (dtype, unit) in enumerate(spec.math.items()):
        roof = np.minimum(unit.peak_flops_per_s, grid * bandwidth)
        shade = 0.15 + 0.45 * i / max(1, len(spec.math) - 1)
        (line,) = ax.plot(
            grid,
            roof,
            lw=1,
            color=str(shade),
            ls=ROOF_STYLES[i % len(ROOF_STYLES)],
            label=f"{dtype} roof (ridge {unit.peak_flops_per_s / bandwidth:.0f})",
        )
        roofs.append(line)
    total = max(analysis.time_s, 1e-30)
    times = [sum(r.time_s for r in g) for g in groups]
    sc = ax.scatter(
        xs[: len(groups)],
        ys[: len(groups)],
        s=[max(6.0, 3000 * t / total) for t in times],
        c=[CATEGORY_COLORS.get(g[0].category, "#000") for g in groups],
        alpha=0.6,
        edgecolors="#333",
        linewidths=0.3,
    )
    sc.set_gid("roofline-points")
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
    shown = {g[0].category for g in groups}
    markers = [
        Line2D([], [], ls="", marker="o", color=color, alpha=0.7, label=name)
        for name, color in CATEGORY_COLORS.items()
        if name in shown
    ]
    # legends beside the axes: inside, they would hide points or roofs
    ops = ax.legend(
        handles=markers, fontsize=7, title="ops", loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    ax.add_artist(ops)
    ax.legend(handles=roofs, fontsize=7, title="roofs", loc="lower left", bbox_to_anchor=(1.01, 0))
    svg = _svg(fig)
    titles = [
        html.escape(
            f"{len(g)} x {module_pattern([r.module for r in g])} {g[0].op} {g[0].phase} "
            f"{g[0].shapes[:2]} {g[0].bound}-bound, {g[0].time_s * 1e6:.1f} us each, "
            f"{t * 1e3:.3f} ms in all"
        )
        for g, t in zip(groups, times, strict=True)
    ]
    return _add_titles(svg, "roofline-points", titles)


def _add_titles(svg: str, gid: str, titles: list[str]) -> str:
    """Give each point of a scatter a <title> (the browser's hover text)."""
    start = svg.find(f'id="{gid}"')
    if start < 0:
        return svg
    end = svg.find("</g>", start)
    group = svg[start:end]
    counter = iter(titles)

    def add(match):
        title = next(counter, None)
        if title is None:
            return match.group(0)
        return f"{match.group(1)}><title>{title}</title></{match.group(2)}>"

    group = re.sub(r"(<(use|path) [^>]*?)\s*/>", add, group, flags=re.DOTALL)
    return svg[:start] + group + svg[end:]


def category_svg(analysis) -> str:
    fig, ax = _figure(6, 3.2)
    cats = {k: v for k, v in analysis.categories.items() if v["flops"] or v["time_s"]}
    names = list(cats)
    total_f = max(sum(c["flops"] for c in cats.values()), 1)
    total_t = max(sum(c["time_s"] for c in cats.values()), 1e-30)
    import numpy as np

    x = np.arange(len(names))
    ax.bar(x - 0.2, [100 * cats[n]["flops"] / total_f for n in names], 0.4, label="% FLOP")
    ax.bar(x + 0.2, [100 * cats[n]["time_s"] / total_t for n in names], 0.4, label="% time")
    ax.set_xticks(x, names)
    ax.set_ylabel("%")
    ax.set_title("% FLOP vs % runtime by category")
    ax.legend()
    return _svg(fig)


def bars_svg(title: str, labels: list[str], values: list[float], unit: str) -> str:
    fig, ax = _figure(7, max(2.0, 0.28 * len(labels) + 1))
    ax.barh(range(len(labels)), values, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    return _svg(fig)


def scatter_svg(title, xs, ys, xlabel, ylabel) -> str:
    fig, ax = _figure(5, 4)
    ax.scatter(xs, ys, s=10, alpha=0.6)
    lim = [min(xs + ys), max(xs + ys)]
    ax.plot(lim, lim, "k--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _svg(fig)


class Raw(str):
    """A table cell that is already HTML (the renderer's own markup, never user text)."""


def _cell(value) -> str:
    return value if isinstance(value, Raw) else html.escape(str(value))


def _table(headers: list[str], rows: list[list], note: str = "", css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    head = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    extra = f"<p class='note'>{html.escape(note)}</p>" if note else ""
    cls = f" class='{css}'" if css else ""
    return f"<table{cls}>{head}<tbody>{body}</tbody></table>{extra}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _panel(*parts: str, wide: bool = False) -> str:
    return f"<section class='{'panel wide' if wide else 'panel'}'>" + "".join(parts) + "</section>"


def _summary(analysis, memory) -> str:
    totals = analysis.totals
    rows = [
        ["precision", analysis.precision],
        ["step", "training" if analysis.training else "inference"],
        ["parameters", f"{analysis.params / 1e6:,.1f} M"],
        ["predicted step time", _ms(analysis.time_s)],
        [
            "throughput",
            ", ".join(
                f"{v:,.1f} {k.replace('_per_s', '/s')}" for k, v in analysis.throughput.items()
            ),
        ],
        ["model FLOPs utilization", f"{analysis.mfu:.1%}"],
        ["FLOPs / bytes", f"{totals['flops']:.3e} / {totals['bytes']:.3e}"],
    ]
    if memory is not None:
        text = html.escape(
            f"{memory.peak_bytes / 2**30:.2f} GiB of {memory.capacity_bytes / 2**30:.0f} GiB "
            f"({memory.peak_phase}): "
        )
        verdict = "<b class='ok'>fits</b>" if memory.fits else "<b class='bad'>does not fit</b>"
        rows.append(["peak memory", Raw(text + verdict)])
    return _table(["", ""], rows, css="summary")


def _modules(analysis) -> str:
    lines = module_tree(analysis, depth=2)
    top = [line for line in lines if line.level == 1]
    chart = bars_svg(
        "time by top-level module (% of the step)",
        [line.path for line in top],
        [100 * line.share_of_step for line in top],
        "% of the step",
    )
    rows = [
        [
            Raw("&nbsp;" * 4 * (line.level - 1) + html.escape(line.path)),
            line.ops,
            _ms(line.time_s),
            f"{line.share_of_step:.1%}" if line.level == 1 else "",
            f"{line.share_of_parent:.1%}" if line.level > 1 else "",
        ]
        for line in lines
    ]
    return chart + _table(
        ["module", "ops", "time", "% of step", "% of parent"],
        rows,
        "Top-level modules, each with its slowest sub-modules as shares of it.",
    )


def _gemms(analysis) -> str:
    rows = [r for r in analysis.rows if r.gemms]
    table, groups = [], op_groups(rows)
    for group in groups[:MAX_ROWS]:
        r = group[0]
        for g in r.gemms:
            flags = [d.upper() for d, v in g.alignment.items() if v != "ok"]
            table.append(
                [
                    module_pattern([x.module for x in group]),
                    r.op.split(".")[1] if "." in r.op else r.op,
                    r.phase,
                    g.m,
                    g.n,
                    g.k,
                    g.batch * g.count,
                    g.dtype,
                    g.tile,
                    f"{g.tile_efficiency:.0%}",
                    f"{g.wave_efficiency:.0%}",
                    "misaligned " + "/".join(flags) if flags else "ok",
                    len(group),
                    _ms(g.time_s),
                    _ms(g.time_s * len(group)),
                ]
            )
    note = "Ops with the same op, phase, shapes and dtype are one row; `*` marks where their "
    note += "modules differ."
    if len(groups) > MAX_ROWS:
        note += f" The {MAX_ROWS} slowest groups of {len(groups)}."
    headers = ["modules", "op", "phase", "M", "N", "K", "GEMMs/op", "dtype", "tile"]
    headers += ["tile eff.", "wave eff.", "alignment", "ops", "time/op", "total"]
    return _table(headers, table, note)


def _memory(memory) -> list[str]:
    terms = {
        "weights": memory.weights_bytes,
        "gradients": memory.gradients_bytes,
        "optimizer": memory.optimizer_bytes,
        "activations": memory.activations_bytes,
        "transient": memory.transient_bytes,
        "overhead": memory.overhead_bytes,
    }
    verdict = "fits" if memory.fits else "DOES NOT FIT"
    top = list(memory.by_module.items())[:15]
    return [
        bars_svg(
            f"memory of one training step: {memory.peak_bytes / 2**30:.1f} of "
            f"{memory.capacity_bytes / 2**30:.0f} GiB, {verdict}",
            list(terms),
            [v / 2**30 for v in terms.values()],
            "GiB",
        ),
        bars_svg("activations by module", [m for m, _ in top], [v / 2**30 for _, v in top], "GiB"),
    ]


STYLE = (
    "body{font-family:sans-serif;margin:1.5em 2em;color:#222}"
    ".row{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1.5em;"
    "align-items:start}"
    ".row.lead{grid-template-columns:minmax(300px,1fr) minmax(560px,2.2fr)}"
    ".panel{min-width:0}.wide{grid-column:1/-1}"
    "table{border-collapse:collapse;font-size:12px;margin:1em 0;width:100%}"
    "table.summary{font-size:14px}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
    "th{background:#f0f0f0}.note{color:#666;font-size:12px}"
    "svg{width:100%;height:auto}.bad{color:#c00}.ok{color:#080}"
)


def render(analysis, memory=None, advice=None, measurement=None) -> str:
    title = f"dlperf: {html.escape(analysis.model)} on {html.escape(analysis.gpu)}"
    roofline = "<h2>Roofline</h2>" + roofline_svg(analysis)
    if len(op_groups(r for r in analysis.rows if r.flops)) > MAX_POINTS:
        roofline += f"<p class='note'>The {MAX_POINTS} slowest groups of ops are drawn.</p>"
    parts = [
        f"<h1>{title}</h1>",
        "<div class='row lead'>"
        + _panel("<h2>Summary</h2>", _summary(analysis, memory))
        + _panel(roofline)
        + "</div>",
        "<h2>Where the time goes</h2>",
        "<div class='row'>"
        + _panel(category_svg(analysis))
        + _panel(
            bars_svg(
                "time by phase",
                list(analysis.phases),
                [1e3 * p["time_s"] for p in analysis.phases.values()],
                "ms",
            )
        )
        + _panel(_modules(analysis))
        + "</div>",
        "<h2>GEMMs</h2>" + _gemms(analysis),
    ]
    if memory is not None:
        parts.append(
            "<h2>Memory</h2><div class='row'>"
            + "".join(_panel(chart) for chart in _memory(memory))
            + "</div>"
        )
    if advice is not None:
        parts.append(
            "<h2>Findings</h2>"
            + _table(
                ["rule", "severity", "modules", "fix", "gain", "how"],
                [
                    [
                        f.rule,
                        f.severity,
                        ", ".join(f.modules[:3]),
                        f.fix,
                        f"{_ms(f.gain_time_s)} ({f.gain_fraction:.1%})" if f.gain_time_s else "",
                        f.how,
                    ]
                    for f in advice.findings
                ],
                f"predicted step {_ms(advice.predicted_time_s)} -> "
                f"{_ms(advice.predicted_time_after_s)} with every finding applied",
            )
        )
    if measurement is not None:
        pairs = [
            (o["predicted_time_s"], o["measured_time_s"])
            for o in measurement.ops
            if o["measured_time_s"]
        ]
        if pairs:
            parts.append(
                "<h2>Measured vs predicted</h2>"
                + scatter_svg(
                    f"per op on {measurement.device}",
                    [m for _, m in pairs],
                    [p for p, _ in pairs],
                    "measured s",
                    "predicted s",
                )
            )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>dlperf report: {html.escape(analysis.model)}</title><style>{STYLE}</style>"
        "</head><body>" + "\n".join(parts) + "</body></html>\n"
    )
