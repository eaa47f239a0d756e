"""A self-contained HTML report: summary, roofline, breakdowns, GEMM table,
memory, findings, measurements and serving (html_serve.py). The charts are
drawn by charts.py; this module lays them out with the tables, one function
per section."""

from __future__ import annotations

import html

from .charts import (  # noqa: F401  (CATEGORY_COLORS, module_pattern, op_groups: re-exported)
    CATEGORY_COLORS,
    MAX_POINTS,
    bars_svg,
    category_svg,
    module_pattern,
    op_groups,
    roofline_svg,
    scatter_svg,
)
from .html_parts import Raw
from .html_parts import ms as _ms
from .html_parts import panel as _panel
from .html_parts import row as _row
from .html_parts import table as _table
from .html_serve import serving_section
from .modules import module_tree
from .terminal.analysis import run_lines
from .terminal.format import parameters, relative_error, sig

MAX_ROWS = 200  # rows per table

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


def render(
    analysis, memory=None, advice=None, measurement=None, serving=None, comparison=None
) -> str:
    """The page: the analysis always; memory, findings, measurements, a
    profiler trace's comparison and serving (a `serving.sweep.ServingSweep`)
    when given."""
    title = f"dlperf: {html.escape(analysis.model)} on {html.escape(analysis.gpu)}"
    parts = [f"<h1>{title}</h1>", _lead(analysis, memory), *_where_the_time_goes(analysis)]
    parts.append("<h2>GEMMs</h2>" + _gemms(analysis))
    if memory is not None:
        parts.append(_memory(memory))
    if advice is not None:
        parts.append(_findings(advice))
    if measurement is not None:
        parts.append(_measured(measurement))
    if comparison is not None:
        parts.append(_compared(comparison))
    if serving is not None:
        parts.append(serving_section(serving))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>dlperf report: {html.escape(analysis.model)}</title><style>{STYLE}</style>"
        "</head><body>" + "\n".join(p for p in parts if p) + "</body></html>\n"
    )


def _lead(analysis, memory) -> str:
    """The summary table beside the roofline."""
    roofline = "<h2>Roofline</h2>" + roofline_svg(analysis)
    if len(op_groups(r for r in analysis.rows if r.flops)) > MAX_POINTS:
        roofline += f"<p class='note'>The {MAX_POINTS} slowest groups of ops are drawn.</p>"
    summary = _panel("<h2>Summary</h2>", _summary(analysis, memory))
    return _row(summary, _panel(roofline), css="row lead")


def _summary(analysis, memory) -> str:
    totals = analysis.totals
    rate = ", ".join(
        f"{sig(v)} {k.replace('_per_s', '/s')}" for k, v in analysis.throughput.items()
    )
    rows = [
        ["precision", analysis.precision],
        ["step", "training" if analysis.training else "inference"],
        ["parameters", parameters(analysis.params).removesuffix(" parameters")],
        ["predicted step time", _ms(analysis.step_time_s)],
        ["throughput", rate],
        ["model FLOPs utilization", f"{analysis.mfu:.1%}"],
        ["FLOPs / bytes", f"{totals['flops']:.3e} / {totals['bytes']:.3e}"],
    ]
    # how the step runs: host waits, checkpointing, compile, the attention kernel
    rows += [["as run", line] for line in run_lines(analysis)]
    if memory is not None:
        text = html.escape(
            f"{memory.peak_bytes / 2**30:.2f} GiB of {memory.capacity_bytes / 2**30:.0f} GiB "
            f"({memory.peak_phase}): "
        )
        verdict = "<b class='ok'>fits</b>" if memory.fits else "<b class='bad'>does not fit</b>"
        rows.append(["peak memory", Raw(text + verdict)])
    elif analysis.memory is not None:  # the step's own verdict, without the memory section
        m = analysis.memory
        text = f"{m['peak_bytes'] / 2**30:.2f} GiB of {m['gpu_bytes'] / 2**30:.0f} GiB: "
        verdict = "<b class='ok'>fits</b>" if m["fits"] else "<b class='bad'>does not fit</b>"
        rows.append(["peak memory", Raw(text + verdict)])
    return _table(["", ""], rows, css="summary")


def _where_the_time_goes(analysis) -> list[str]:
    phases = bars_svg(
        "time by phase",
        list(analysis.phases),
        [1e3 * p["time_s"] for p in analysis.phases.values()],
        "ms",
    )
    panels = (_panel(category_svg(analysis)), _panel(phases), _panel(_modules(analysis)))
    return ["<h2>Where the time goes</h2>", _row(*panels)]


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


GEMM_HEADERS = ["modules", "op", "phase", "M", "N", "K", "GEMMs/op", "dtype", "tile"]
GEMM_HEADERS += ["tile eff.", "wave eff.", "alignment", "ops", "time/op", "total"]


def _gemms(analysis) -> str:
    groups = op_groups(r for r in analysis.rows if r.gemms)
    table = [_gemm_row(group, g) for group in groups[:MAX_ROWS] for g in group[0].gemms]
    note = "Ops with the same op, phase, shapes and dtype are one row; `*` marks where their "
    note += "modules differ."
    if len(groups) > MAX_ROWS:
        note += f" The {MAX_ROWS} slowest groups of {len(groups)}."
    return _table(GEMM_HEADERS, table, note)


def _gemm_row(group, g) -> list:
    """One GEMM of a group of identical ops."""
    r = group[0]
    flags = [d.upper() for d, v in g.alignment.items() if v != "ok"]
    return [
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


def _memory(memory) -> str:
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
    charts = [
        bars_svg(
            f"memory of one training step: {memory.peak_bytes / 2**30:.1f} of "
            f"{memory.capacity_bytes / 2**30:.0f} GiB, {verdict}",
            list(terms),
            [v / 2**30 for v in terms.values()],
            "GiB",
        ),
        bars_svg("activations by module", [m for m, _ in top], [v / 2**30 for _, v in top], "GiB"),
    ]
    return "<h2>Memory</h2>" + _row(*(_panel(chart) for chart in charts))


def _findings(advice) -> str:
    rows = [
        [
            f.rule,
            f.severity,
            ", ".join(f.modules[:3]),
            f.fix,
            f"{_ms(f.gain_time_s)} ({f.gain_fraction:.1%})" if f.gain_time_s else "",
            f.how,
        ]
        for f in advice.findings
    ]
    note = (
        f"predicted step {_ms(advice.predicted_time_s)} -> "
        f"{_ms(advice.predicted_time_after_s)} with every finding applied"
    )
    headers = ["rule", "severity", "modules", "fix", "gain", "how"]
    return "<h2>Findings</h2>" + _table(headers, rows, note)


def _compared(c) -> str:
    """A profiler trace of the run against the prediction: per category, per
    module, and each matched op on a scatter."""
    head = (
        f"<p class='note'>{html.escape(c.path)}: {c.steps} step(s), priced as "
        f"{html.escape(c.gpu)}; step predicted {_ms(c.predicted_step_s)}, measured "
        f"{_ms(c.measured_step_s)}; {c.mapped_share:.1%} of the measured time on a model op "
        "or a named category</p>"
    )

    def beside(entries) -> list[list[str]]:  # (name, predicted s, measured s)
        return [[name, _ms(p), _ms(m), relative_error(p, m)] for name, p, m in entries]

    categories = beside((k, v["predicted_s"], v["measured_s"]) for k, v in c.categories.items())
    modules = beside((m["module"], m["predicted_s"], m["measured_s"]) for m in c.modules)
    headers = ["", "predicted", "measured", "error"]
    chart = ""
    if c.rows:
        chart = scatter_svg(
            "per matched op",
            [r.measured_s for r in c.rows],
            [r.predicted_s for r in c.rows],
            "measured s",
            "predicted s",
        )
    return (
        "<h2>Your trace against the prediction</h2>"
        + head
        + _table(["category", *headers[1:]], categories)
        + _table(["module", *headers[1:]], modules, "matched ops only, per step")
        + chart
    )


def _measured(measurement) -> str:
    """Each measured op against its prediction ("" when no op was matched)."""
    pairs = [
        (o["predicted_time_s"], o["measured_time_s"])
        for o in measurement.ops
        if o["measured_time_s"]
    ]
    if not pairs:
        return ""
    chart = scatter_svg(
        f"per op on {measurement.device}",
        [m for _, m in pairs],
        [p for p, _ in pairs],
        "measured s",
        "predicted s",
    )
    return "<h2>Measured vs predicted</h2>" + chart
