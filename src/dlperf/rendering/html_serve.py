"""The HTML report's Serving section: a decoder's latency and throughput
against the batch size (`serving.sweep.ServingSweep`), the batches whose KV
caches no longer fit shaded, a table per batch, and where decode turns
math-bound. A model that is not served gets one line saying why."""

from __future__ import annotations

import html

from .charts import lines_svg
from .html_parts import ms as _ms
from .html_parts import panel as _panel
from .html_parts import row as _row
from .html_parts import table as _table

MEMORY_LIMIT = "memory limit"


def serving_section(sweep) -> str:
    if sweep.absent:
        return "<h2>Serving</h2>" + _note(f"No serving section: {sweep.absent}")
    charts = _row(_panel(_latency(sweep)), _panel(_throughput(sweep)))
    if sweep.rates:
        charts += _row(_panel(_against_rate(sweep)))
    return "<h2>Serving</h2>" + _note(_setup(sweep)) + charts + _table_of(sweep) + _bound(sweep)


def _against_rate(sweep) -> str:
    """TTFT and TPOT (median and P99) of the simulated engine against the request rate."""
    p = sweep.rates
    series = {
        "time to first token, median": [1e3 * x.ttft_p50_s for x in p],
        "time to first token, P99": [1e3 * x.ttft_p99_s for x in p],
        "time per output token, median": [1e3 * x.tpot_p50_s for x in p],
        "time per output token, P99": [1e3 * x.tpot_p99_s for x in p],
    }
    capacity = (sweep.capacity, f"capacity: {sweep.capacity:,.3g} requests/s (all sent at once)")
    return lines_svg(
        "latency against request rate (simulated, continuous batching)",
        [x.rate for x in p],
        series,
        "requests/s (Poisson arrivals)",
        "ms",
        capacity,
        log_y=True,
    )


def _note(text: str) -> str:
    return f"<p class='note'>{html.escape(text)}</p>"


def _setup(sweep) -> str:
    fits = (
        f"the KV caches of up to {sweep.max_batch:,} requests fit"
        if sweep.max_batch
        else "the weights leave no room for a KV cache: no batch fits"
    )
    return (
        f"{sweep.model} served on one {sweep.gpu} with a KV cache ({sweep.kv_cache_dtype}): "
        f"static batches of requests of {sweep.input_len} prompt and {sweep.output_len} output "
        f"tokens each, in {sweep.precision} ({sweep.precision_reason}); {fits}. "
        "`dlperf serve` gives more (tensor and pipeline parallelism, quantized weights, "
        "in-flight batching)."
    )


def _limit(sweep) -> tuple[float, str]:
    """Where the KV caches stop fitting: between the largest batch that fits
    and the next (the line), or before batch 1 when none fits."""
    if sweep.max_batch == 0:
        return 0.9, f"{MEMORY_LIMIT}: no batch fits"
    return sweep.max_batch, f"{MEMORY_LIMIT}: batch {sweep.max_batch:,} fits, more does not"


def _marks(sweep) -> dict[str, float]:
    turn = sweep.math_bound_from_batch
    if turn is None or turn > sweep.batches[-1]:
        return {}
    return {f"decode math-bound from batch {turn}": turn}


def _latency(sweep) -> str:
    p = sweep.points
    series = {
        "time to first token": [1e3 * x.ttft_s for x in p],
        "time per output token": [1e3 * x.tpot_s for x in p],
        "request latency": [1e3 * x.latency_s for x in p],
    }
    return lines_svg(
        "latency against batch size",
        sweep.batches,
        series,
        "batch (requests)",
        "ms",
        _limit(sweep),
        _marks(sweep),
        log_y=True,
    )


def _throughput(sweep) -> str:
    rate = [x.output_tokens_per_s_per_gpu for x in sweep.points]
    return lines_svg(
        "throughput against batch size",
        sweep.batches,
        {"output tokens/s per GPU": rate},
        "batch (requests)",
        "output tokens/s per GPU",
        _limit(sweep),
        _marks(sweep),
    )


HEADERS = ["batch", "time to first token", "time per output token", "request latency"]
HEADERS += ["output tokens/s per GPU", "memory per GPU", "fits"]


def _table_of(sweep) -> str:
    rows = [
        [
            p.batch,
            _ms(p.ttft_s),
            _ms(p.tpot_s),
            _ms(p.latency_s),
            f"{p.output_tokens_per_s_per_gpu:,.1f}",
            f"{p.memory_per_gpu_bytes / 2**30:,.2f} GiB",
            "yes" if p.fits else "no: the KV caches do not fit",
        ]
        for p in sweep.points
    ]
    return _table(HEADERS, rows)


def _bound(sweep) -> str:
    """serve's sentence on decode's bound, and whether its turn to math comes
    at a batch that fits."""
    lines = list(sweep.notes)
    turn = sweep.math_bound_from_batch
    if turn is not None and sweep.max_batch and turn > sweep.max_batch:
        lines.append(
            f"Batch {turn} does not fit ({sweep.max_batch:,} is the largest that does): at "
            "every batch that fits, decode's linear layers stay bound by reading their weights."
        )
    return "".join(_note(line) for line in lines)
