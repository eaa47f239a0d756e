"""`dlperf serve`: a request's times, the deployment's throughput, memory per
GPU, and per phase the ops that take the time."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .format import gib, seconds, short_op, si, wide_console


def serve_report(r, console: Console | None = None) -> None:
    console = console or wide_console()
    gpus = f"{r.tp * r.pp} x " if r.tp * r.pp > 1 else ""
    split = f" (tp {r.tp}, pp {r.pp})" if r.tp * r.pp > 1 else ""
    console.print(
        f"[bold]{escape(r.model)}[/] on {gpus}[bold]{r.gpu}[/]{split}, {r.precision} "
        f"(KV cache {r.kv_cache_dtype}): batch {r.batch}, {r.input_len} prompt + "
        f"{r.output_len} output tokens" + (", CUDA graphs" if r.cuda_graphs else "")
    )
    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("time to first token", seconds(r.ttft_s))
    table.add_row("time per output token", seconds(r.tpot_s))
    table.add_row("request latency", seconds(r.latency_s))
    table.add_row("output tokens/s", f"{r.output_tokens_per_s:,.1f}")
    table.add_row("output tokens/s per GPU", f"{r.output_tokens_per_s_per_gpu:,.1f}")
    if r.energy_per_output_token_j is not None:
        table.add_row("energy per output token", f"{r.energy_per_output_token_j:,.3f} J")
    console.print(table)
    _memory(r, console)
    for name, phase in (("prefill", r.prefill), ("decode step (mean)", r.decode)):
        _phase(name, phase, console)
    if r.concurrency:
        c = r.concurrency
        console.print(
            f"in flight: {c['requests_in_flight']} requests, an iteration every "
            f"{seconds(c['iteration_s'])}: {c['output_tokens_per_s']:,.1f} output tokens/s, "
            f"latency {seconds(c['latency_s'])}"
        )
    if r.speculative:
        sp = r.speculative
        by = f" with {escape(sp['draft_model'])}" if sp["draft_model"] else ""
        console.print(
            f"speculative decoding ({sp['method']}{by}, {sp['num_speculative_tokens']} guesses, "
            f"{sp['acceptance_rate']:.0%} accepted): {sp['tokens_per_step']:.2f} tokens a step of "
            f"{seconds(sp['step_s'])}, time per output token {seconds(sp['tpot_s'])} "
            f"({sp['speedup']:.2f}x)"
        )
    for note in r.notes:
        console.print(f"[cyan]{escape(note)}[/]")
    if r.unsupported_ops:
        names = ", ".join(f"{short_op(k)} x{v}" for k, v in r.unsupported_ops.items())
        console.print(f"[yellow]ops without a cost model (priced as memory-bound):[/] {names}")


def _memory(r, console: Console) -> None:
    m = r.memory
    verdict = "fits" if r.fits else "[red]does not fit[/]"
    usable = f" of {gib(m['budget_bytes'])} usable" if "budget_bytes" in m else ""
    console.print(
        f"memory per GPU {gib(m['total_bytes'])}{usable} ({verdict}): "
        f"weights {gib(m['weights_bytes'])}, "
        f"KV cache {gib(m['kv_cache_bytes'])}, activations {gib(m['activations_bytes'])}, "
        f"workspace {gib(m['workspace_bytes'])}"
    )
    console.print(
        f"KV cache {si(r.kv_cache_bytes_per_token, 'B')} per token "
        f"({si(r.kv_cache_bytes_per_token_per_gpu, 'B')} per GPU); "
        f"largest batch that fits: [bold]{r.max_batch}[/]"
    )


def _phase(name: str, phase, console: Console) -> None:
    comm = f", collectives {seconds(phase.comm_s)}" if phase.comm_s else ""
    console.print(
        f"[bold]{name}[/]: {seconds(phase.time_s)} for {phase.tokens} tokens, "
        f"{si(phase.flops, 'FLOP')}, {si(phase.bytes, 'B')} per GPU, "
        f"mostly {phase.bound}-bound{comm}"
    )
    table = Table()
    for col in ("module", "op", "count", "time", "share", "bound"):
        table.add_column(col, justify="left" if col in ("module", "op") else "right")
    for op in phase.top_ops:
        table.add_row(
            escape(op["module"] or "(model)"),
            escape(short_op(op["op"])),
            str(op["count"]),
            seconds(op["time_s"]),
            f"{op['share']:.0%}",
            op["bound"],
        )
    console.print(table)
