"""A self-contained HTML report: summary, roofline, breakdowns, GEMM table,
memory, findings and measurements. Charts are matplotlib SVG drawn inline
(no CDN, no script); hovering a roofline point shows its op."""

from __future__ import annotations

import html
import io
import re

CATEGORY_COLORS = {
    "contraction": "#1f77b4",
    "normalization": "#ff7f0e",
    "elementwise": "#2ca02c",
    "other": "#7f7f7f",
}
MAX_POINTS = 2000  # roofline points drawn (the slowest ops); the rest are summarised
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


def roofline_svg(analysis) -> str:
    spec = analysis.spec
    fig, ax = _figure(8, 5)
    rows = sorted(
        (r for r in analysis.rows if r.flops > 0 and r.bytes > 0 and r.time_s > 0),
        key=lambda r: r.time_s,
        reverse=True,
    )[:MAX_POINTS]
    bandwidth = spec.memory_bandwidth_bytes_per_s
    xs = [r.arithmetic_intensity for r in rows]
    lo, hi = min(xs + [0.1]) / 2, max(xs + [1e4]) * 2
    import numpy as np

    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    for dtype, unit in spec.math.items():
        roof = np.minimum(unit.peak_flops_per_s, grid * bandwidth)
        ax.plot(
            grid, roof, lw=1, label=f"{dtype} roof (ridge {unit.peak_flops_per_s / bandwidth:.0f})"
        )
    total = max(analysis.time_s, 1e-30)
    sc = ax.scatter(
        xs,
        [r.flops / r.time_s for r in rows],
        s=[max(4, 2000 * r.time_s / total) for r in rows],
        c=[CATEGORY_COLORS.get(r.category, "#000") for r in rows],
        alpha=0.6,
    )
    sc.set_gid("roofline-points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("achieved FLOP/s (predicted)")
    ax.set_title(f"roofline of {spec.id}: one point per op, area = time")
    ax.legend(fontsize=7, loc="lower right")
    svg = _svg(fig)
    titles = [
        html.escape(
            f"{r.module or '(model)'} {r.op} {r.phase} {r.shapes[:2]} "
            f"{r.bound}-bound {r.time_s * 1e6:.1f} us"
        )
        for r in rows
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


def _table(headers: list[str], rows: list[list], note: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    extra = f"<p class='note'>{html.escape(note)}</p>" if note else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{extra}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def render(analysis, memory=None, advice=None, measurement=None) -> str:
    totals = analysis.totals
    parts = [f"<h1>dlperf: {html.escape(analysis.model)} on {html.escape(analysis.gpu)}</h1>"]
    summary = [
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
        summary.append(
            [
                "peak memory",
                f"{memory.peak_bytes / 2**30:.2f} GiB of "
                f"{memory.capacity_bytes / 2**30:.0f} GiB ({memory.peak_phase})",
            ]
        )
    parts.append(_table(["", ""], summary))
    parts.append("<h2>Roofline</h2>" + roofline_svg(analysis))
    if len([r for r in analysis.rows if r.flops]) > MAX_POINTS:
        parts.append(f"<p class='note'>The {MAX_POINTS} slowest ops are drawn.</p>")
    parts.append("<h2>Where the time goes</h2>" + category_svg(analysis))
    modules = sorted(analysis.modules(2).items(), key=lambda kv: kv[1]["time_s"], reverse=True)[:20]
    parts.append(
        bars_svg(
            "time by module (depth 2)",
            [m for m, _ in modules],
            [1e3 * v["time_s"] for _, v in modules],
            "ms",
        )
    )
    phases = analysis.phases
    parts.append(
        bars_svg("time by phase", list(phases), [1e3 * p["time_s"] for p in phases.values()], "ms")
    )
    gemm_rows = []
    for r in sorted((r for r in analysis.rows if r.gemms), key=lambda r: r.time_s, reverse=True)[
        :MAX_ROWS
    ]:
        for g in r.gemms:
            flags = [d.upper() for d, v in g.alignment.items() if v != "ok"]
            gemm_rows.append(
                [
                    r.module,
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
                    _ms(g.time_s),
                ]
            )
    parts.append(
        "<h2>GEMMs</h2>"
        + _table(
            [
                "module",
                "op",
                "phase",
                "M",
                "N",
                "K",
                "count",
                "dtype",
                "tile",
                "tile eff.",
                "wave eff.",
                "alignment",
                "time",
            ],
            gemm_rows,
            f"The {MAX_ROWS} slowest GEMM-backed ops." if len(gemm_rows) >= MAX_ROWS else "",
        )
    )
    if memory is not None:
        terms = {
            "weights": memory.weights_bytes,
            "gradients": memory.gradients_bytes,
            "optimizer": memory.optimizer_bytes,
            "activations": memory.activations_bytes,
            "transient": memory.transient_bytes,
            "overhead": memory.overhead_bytes,
        }
        parts.append(
            "<h2>Memory</h2>"
            + bars_svg(
                "memory of one training step",
                list(terms),
                [v / 2**30 for v in terms.values()],
                "GiB",
            )
        )
        top = list(memory.by_module.items())[:15]
        parts.append(
            bars_svg(
                "activations by module", [m for m, _ in top], [v / 2**30 for _, v in top], "GiB"
            )
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
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
        "th{background:#f0f0f0}.note{color:#666;font-size:12px}svg{max-width:100%}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>dlperf report: {html.escape(analysis.model)}</title><style>{style}</style>"
        "</head><body>" + "\n".join(parts) + "</body></html>\n"
    )
