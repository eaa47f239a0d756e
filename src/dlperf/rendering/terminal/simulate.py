"""`dlperf serve --request-rate ...`: a simulated serving benchmark, laid out
as `benchmark_serving` prints one (throughputs, then each latency's mean,
median, P90 and P99), with goodput and the largest rate meeting the SLO."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import gib, seconds, wide_console

LATENCIES = (
    ("ttft", "time to first token"),
    ("tpot", "time per output token"),
    ("itl", "inter-token latency"),
    ("e2e", "request latency"),
)


def simulation_report(r, console: Console | None = None) -> None:
    console = console or wide_console()
    gpus = f"{r.tp * r.pp} x " if r.tp * r.pp > 1 else ""
    arrivals = "all at once" if math.isinf(r.request_rate) else f"{r.request_rate:g} requests/s"
    console.print(
        f"[bold]{escape(r.model)}[/] on {gpus}[bold]{r.gpu}[/], {r.precision}: "
        f"{r.num_prompts} requests of {escape(r.dataset)}, {arrivals}"
    )
    e = r.engine
    m = e["memory"]
    console.print(
        f"engine: up to {e['max_num_seqs']} sequences and {e['max_num_batched_tokens']} tokens "
        f"a step, {'chunked' if e['chunked_prefill'] else 'whole'} prefill; KV cache "
        f"{gib(m['kv_cache_bytes'])} per GPU in {e['kv_cache_blocks']:,} blocks of "
        f"{e['block_size']} tokens"
    )
    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("benchmark duration", seconds(r.duration_s))
    table.add_row("request throughput", f"{r.request_throughput:,.2f} /s")
    table.add_row("input tokens/s", f"{r.input_throughput:,.1f}")
    table.add_row("output tokens/s", f"{r.output_throughput:,.1f}")
    if r.goodput is not None:
        met = f"{r.slo_attainment:.1%} met the SLO"
        table.add_row("goodput", f"{r.goodput:,.2f} requests/s ({met})")
    table.add_row("mean batch (sequences a step)", f"{r.mean_batch:,.1f}")
    table.add_row("preemptions", f"{r.preemptions:,}")
    console.print(table)
    latency = Table()
    for col in ("latency", "mean", "median", "P90", "P99"):
        latency.add_column(col, justify="left" if col == "latency" else "right")
    for key, name in LATENCIES:
        stats = getattr(r, key)
        latency.add_row(name, *(_time(stats[k]) for k in ("mean", "median", "p90", "p99")))
    console.print(latency)
    if r.stages:
        staged = Table(title="per stage (the requests each stage sent)")
        for col in ("stage", "rate", "requests", "TTFT mean", "TTFT P99", "E2E mean", "E2E P99",
                    "TPOT mean"):  # fmt: skip
            staged.add_column(col, justify="right")
        for st in r.stages:
            staged.add_row(
                str(st["stage"]), f"{st['request_rate']:g}/s", f"{st['num_prompts']:,}",
                _time(st["ttft"]["mean"]), _time(st["ttft"]["p99"]), _time(st["e2e"]["mean"]),
                _time(st["e2e"]["p99"]), _time(st["tpot"]["mean"]),
            )  # fmt: skip
        console.print(staged)
    if r.sustainable_rate is not None:
        verdict = "[red]saturated[/]" if r.saturated else "within it"
        console.print(
            f"sustainable rate (the queue stops growing below it): "
            f"[bold]{r.sustainable_rate:.3g}[/] requests/s; the offered load is {verdict}"
        )
    if r.max_rate and r.max_rate["request_rate"] is not None:
        console.print(
            f"[bold]largest request rate meeting the SLO[/] ({r.max_rate['criterion']}): "
            f"[bold]{r.max_rate['request_rate']:.3g}[/] requests/s (the run above)"
        )
    for note in r.notes:
        console.print(f"[cyan]{escape(note)}[/]")


def _time(value) -> str:
    return "-" if value is None else seconds(value)
