"""The HTML report's Serving section: a decoder's latency and throughput
against the batch size, the memory limit marked where the KV caches stop
fitting; a model that is not a decoder is refused with --serve."""

import math
import re
from pathlib import Path

import pytest

from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.rendering.html_serve import serving_section
from dlperf.run import Session, resolve
from dlperf.serving import serve
from dlperf.serving.sweep import serving_precision, serving_sweep, sweep_batches

TINY = "hf:gpt2:layers=2,n_embd=64,n_head=4,vocab_size=512,n_positions=256"
# Wide enough that its KV caches fill a T4 within the sweep: 2 layers x 2 (K, V)
# x 1024 (8 heads x 128) x 2 B (fp16) = 8192 B per token, 2048 tokens a request.
WIDE = "hf:gpt2:layers=2,n_embd=1024,n_head=8,vocab_size=512,n_positions=2048"
CNN = f"{Path(__file__).parents[1]}/examples/tiny_cnn.py:model"


@pytest.fixture(scope="module")
def wide_on_t4():
    run = resolve(WIDE, gpu="t4", precision="amp-fp16")
    return serving_sweep(run, precision="amp-fp16", input_len=1024, output_len=1024)


def _path_points(svg_text: str, gid: str) -> list[tuple[float, float]]:
    """The vertices of the first path inside the SVG group `gid`."""
    group = svg_text[svg_text.index(f'id="{gid}"') :]
    d = re.search(r'<path d="([^"]+)"', group).group(1)
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def test_cli_report_with_serve_has_the_section(tmp_path):
    out = tmp_path / "r.html"
    # --output-len 2: one decode step, traced at one cache length (a faster test)
    argv = ["report", TINY, "--gpu", "a100", "--infer", "--no-advice", "--serve"]
    argv += ["--output-len", "2", "--out", str(out)]
    assert main(argv) == 0
    page = out.read_text()
    section = page[page.index("<h2>Serving</h2>") :]
    # an amp policy is no serving precision: bf16, which the A100 computes in
    assert "in bf16 (" in section
    # max_batch of the tiny model on 80 GiB is far past 1024: every batch 1..1024 drawn, all fit
    rows = re.findall(r"<tr><td>(\d+)</td>", section)
    assert [int(b) for b in rows] == [2**i for i in range(11)]
    batch_charts = "".join(section.split("<svg")[1:3])  # the third draws the request rate
    assert "no: the KV caches" not in section and 'id="limit"' not in batch_charts
    assert "turn math-bound" in section  # serve's sentence on decode's bound


def test_latency_against_the_request_rate(wide_on_t4):
    # the simulated engine at 1/8 .. 5/4 of its capacity (all requests sent at once): far
    # below it a request decodes nearly alone; near it every step carries the decodes of
    # many requests and the prompts of new ones (chunked prefill admits them at once, so the
    # decodes wait: TPOT grows most)
    sweep = wide_on_t4
    assert [round(p.rate / sweep.capacity, 3) for p in sweep.rates] == [
        0.125, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25
    ]  # fmt: skip
    assert sweep.rates[-1].tpot_p99_s > 5 * sweep.rates[0].tpot_p99_s
    assert sweep.rates[-1].ttft_p99_s > sweep.rates[0].ttft_p99_s
    assert all(p.ttft_p50_s <= p.ttft_p99_s for p in sweep.rates)
    page = serving_section(sweep)
    chart = page.split("<svg")[3]
    assert "latency against request rate" in chart
    assert 'id="series-3"' in chart and 'id="limit"' in chart  # four lines, the capacity


def test_latency_never_falls_as_the_batch_grows(wide_on_t4):
    sweep = wide_on_t4
    assert sweep.precision == "fp16"  # a T4 has no bf16 math
    for name in ("ttft_s", "tpot_s", "latency_s"):
        values = [getattr(p, name) for p in sweep.points]
        assert values == sorted(values), name  # more requests never wait less
    # the latency chart draws them so: SVG y grows downwards
    page = serving_section(sweep)
    for series in ("series-0", "series-1", "series-2"):
        ys = [y for _, y in _path_points(page, series)]
        assert ys == sorted(ys, reverse=True), series


def test_memory_limit_line_sits_at_the_largest_batch_that_fits(wide_on_t4):
    sweep = wide_on_t4
    largest = serve(WIDE, gpu="t4", precision="fp16", input_len=1024, output_len=1024).max_batch
    # 0.9 of the T4's 16 GiB (15.46 GB) less weights, one 2048-token step's activations and
    # the workspace (0.63 GB) leaves 14.83 GB for 16.8 MB caches: 883 requests
    assert sweep.max_batch == largest and 512 < largest < 1024  # the limit inside the sweep
    # the sweep runs to the first power of two at or past twice the limit
    assert sweep.batches == sweep_batches(largest) == [2**i for i in range(11)]
    assert [p.fits for p in sweep.points] == [p.batch <= largest for p in sweep.points]
    page = serving_section(sweep)
    (x512, _), (x1024, _) = _path_points(page, "series-0")[9:11]  # batches 2^9 and 2^10
    (limit_x, _), _ = _path_points(page, "limit")
    # log2 x axis: the line lies log2(largest / 512) of the way from 512 to 1024
    expected = x512 + math.log2(largest / 512) * (x1024 - x512)
    assert limit_x == pytest.approx(expected, abs=1e-3)
    assert f"memory limit: batch {largest} fits" in page


def test_batches_past_the_limit_and_capped():
    assert sweep_batches(0) == [1, 2]  # nothing fits: still a trend
    assert sweep_batches(3) == [1, 2, 4, 8]  # 8 >= 2 x 3
    assert sweep_batches(503) == [2**i for i in range(11)]  # 1024 >= 1006
    assert sweep_batches(10**6)[-1] == 1024  # the cap


def test_serving_precision_follows_the_report_then_the_gpu():
    from dlperf.hardware import gpu

    assert serving_precision("fp8", gpu("h100"))[0] == "fp8"
    assert serving_precision("amp-bf16", gpu("a100"))[0] == "bf16"
    assert serving_precision("amp-bf16", gpu("t4"))[0] == "fp16"  # Turing: no bf16


def test_non_decoder_with_serve_is_one_line_error(capsys, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", CNN, "--infer", "--no-advice", "--serve", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--serve" in err and "decoder" in err
    assert not out.exists()


def test_without_serve_the_report_has_no_serving_section(tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", TINY, "--gpu", "a100", "--infer", "--no-advice", "--out", str(out)]) == 0
    assert "<h2>Serving</h2>" not in out.read_text()


def test_required_sweep_of_a_non_decoder_raises():
    run = resolve(CNN, gpu="a100")
    with pytest.raises(DlperfError, match="--serve"):
        serving_sweep(run, required=True, session=Session())
