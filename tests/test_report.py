"""The HTML report (in a real headless browser when one is installed) and sweeps."""

import csv
import dataclasses
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.cli import main
from dlperf.rendering.html import CATEGORY_COLORS, module_pattern, op_groups, render
from dlperf.rendering.modules import module_tree
from dlperf.rendering.sweeps import LSTM_SEQ, SWEEPS, run_sweep

ARTIFACTS = Path(
    os.environ.get("DLPERF_ARTIFACTS", Path(__file__).parents[1] / ".ci" / "artifacts")
)


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 16 * 16, 10),
    )


def write_report(path):
    x = torch.empty(8, 3, 16, 16, device="meta")
    model = small_cnn()
    a = dlperf.analyze(model, x, gpu="a100", precision="amp-fp16")
    m = dlperf.memory(model, x, gpu="a100", precision="amp-fp16")
    adv = dlperf.advise(model, x, gpu="a100", precision="amp-fp16")
    return dlperf.report(a, path, memory=m, advice=adv)


def test_report_is_self_contained(tmp_path):
    page = Path(write_report(tmp_path / "r.html")).read_text()
    assert page.count("<svg") >= 5  # roofline, categories, modules, phases, memory
    # no CDN or remote assets: nothing is fetched from anywhere
    assert 'src="http' not in page and 'href="http' not in page
    assert "<script" not in page
    assert "<title>" in page.split("</head>", 1)[1]  # hover text on the roofline points


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(
    _browser() is None or shutil.which("chromedriver") is None,
    reason="no headless Chromium (apt-get install chromium chromium-driver)",
)
def test_report_renders_in_headless_chromium(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    path = Path(write_report(tmp_path / "report.html"))
    options = webdriver.ChromeOptions()
    options.binary_location = _browser()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1800,3000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(path.as_uri())
        charts = driver.find_elements("tag name", "svg")
        assert len(charts) >= 5
        for chart in charts:  # every chart drew something
            assert chart.size["width"] > 100 and chart.size["height"] > 50
            assert len(chart.find_elements("css selector", "path")) > 3
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        # the content spans the window, not a fixed column in its middle
        window = driver.execute_script("return window.innerWidth")
        widest = max(t.size["width"] for t in driver.find_elements("tag name", "table"))
        assert widest > 0.8 * window
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "report.png"))
    finally:
        driver.quit()


@pytest.mark.parametrize("name", list(SWEEPS))
def test_every_sweep_writes_csv_and_svg(tmp_path, name):
    csv_path, svg_path = run_sweep(name, None, tmp_path)
    rows = list(csv.reader(Path(csv_path).read_text().splitlines()))
    assert len(rows) > 3
    assert Path(svg_path).read_text().startswith("<svg")


def test_k_alignment_sweep_shows_multiples_of_8(tmp_path):
    csv_path, _ = run_sweep("gemm-k-alignment", "v100", tmp_path)
    lines = Path(csv_path).read_text().splitlines()
    rows = {int(r["K"]): float(r["time_ms"]) for r in csv.DictReader(lines)}
    aligned = [t for k, t in rows.items() if k % 8 == 0]
    assert max(aligned) < min(t for k, t in rows.items() if k % 8)


def test_cli_report_and_sweep(tmp_path, capsys):
    out = tmp_path / "g.html"
    assert (
        main(
            [
                "report",
                f"{Path(__file__).parents[1]}/examples/tiny_cnn.py:model",
                "--gpu",
                "h100",
                "--out",
                str(out),
                "--no-advice",
            ]
        )
        == 0
    )
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["sweep", "--list"]) == 0
    assert "lstm-minibatch" in capsys.readouterr().out
    assert main(["sweep", "nope"]) == 2


class Nested(nn.Module):
    """Two top-level blocks of sub-modules, so that module levels can mix."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
        self.head = nn.Sequential(nn.Linear(256, 64), nn.ReLU())

    def forward(self, x):
        return self.head(self.body(x))


def test_module_shares_of_one_level_never_exceed_the_whole():
    a = dlperf.analyze(Nested(), torch.empty(512, 256, device="meta"), gpu="a100")
    lines = module_tree(a, depth=2)
    top = [line for line in lines if line.level == 1]
    assert {"body", "head"} <= {line.path for line in top}
    assert sum(line.share_of_step for line in top) <= 1 + 1e-9
    for parent in top:
        children = [x for x in lines if x.level == 2 and x.path.startswith(parent.path + ".")]
        assert sum(c.share_of_parent for c in children) <= 1 + 1e-9
        for c in children:  # a share of the parent is the child's time over the parent's
            assert c.share_of_parent == pytest.approx(c.time_s / parent.time_s)
    # body.0 follows body, not the other top-level modules
    order = [line.path for line in lines]
    assert order.index("body.0") == order.index("body") + 1 + order[
        order.index("body") + 1 :
    ].index("body.0")
    assert all(
        order.index(x.path) > order.index("body") for x in lines if x.path.startswith("body.")
    )


def test_module_pattern_stars_what_differs():
    paths = [f"model.layers.{i}.mlp.up_proj" for i in range(32)]
    assert module_pattern(paths) == "model.layers.*.mlp.up_proj"
    assert module_pattern(["fc", "fc"]) == "fc"
    assert module_pattern(["a.b", "a.b.c"]) == "a.b and 1 more"


def _stack(n):
    return nn.Sequential(*[nn.Linear(128, 128) for _ in range(n)])


def test_identical_layers_are_one_gemm_row_and_one_roofline_point():
    layers = 4
    a = dlperf.analyze(_stack(layers), torch.empty(64, 128, device="meta"), gpu="a100")
    forward = [g for g in op_groups(r for r in a.rows if r.gemms) if g[0].phase == "forward"]
    assert len(forward) == 1 and len(forward[0]) == layers  # 4 Linear(128, 128) on 64 x 128
    page = render(a)
    gemm_table = page.split("<h2>GEMMs</h2>", 1)[1].split("</table>", 1)[0]
    forward_rows = [row for row in gemm_table.split("<tr>") if "<td>forward</td>" in row]
    assert len(forward_rows) == 1 and f"<td>{layers}</td>" in forward_rows[0]
    assert "<td>*</td>" in forward_rows[0]  # modules 0, 1, 2, 3
    # one hover title per roofline point, each naming how many ops it stands for
    titles = page.split('id="roofline-points"', 1)[1].split("</g>", 1)[0].count("<title>")
    assert titles == len(op_groups(r for r in a.rows if r.flops and r.bytes and r.time_s))
    assert f"{layers} x *" in page


def test_roofline_has_a_legend_and_op_colours_that_no_roof_uses():
    a = dlperf.analyze(small_cnn(), torch.empty(8, 3, 16, 16, device="meta"), gpu="a100")
    svg = render(a).split("<h2>Roofline</h2>", 1)[1]
    for name in ("ops", "roofs", "contraction"):
        assert f">{name}</text>" in svg  # legend entries, written as SVG text
    for dtype in a.spec.math:
        assert f"{dtype} roof" in svg
    # the roofs are drawn before the points: none of them is in an op colour
    roofs = svg.split('id="roofline-points"', 1)[0]
    assert not any(colour in roofs for colour in CATEGORY_COLORS.values())


def test_report_marks_a_step_that_does_not_fit(tmp_path):
    x = torch.empty(8, 3, 16, 16, device="meta")
    a = dlperf.analyze(small_cnn(), x, gpu="a100")
    m = dlperf.memory(small_cnn(), x, gpu="a100")
    assert m.fits
    assert "<b class='ok'>fits</b>" in render(a, memory=m)
    squeezed = dataclasses.replace(m, capacity_bytes=m.peak_bytes // 2)
    page = render(a, memory=squeezed)
    assert not squeezed.fits and "<b class='bad'>does not fit</b>" in page
    assert "DOES NOT FIT" in page  # the memory chart's title too


def test_lstm_sweep_persistent_kernel_skips_the_per_step_launch(tmp_path):
    from dlperf.hardware import gpu
    from dlperf.ops.rnn import PERSISTENT_MAX_BATCH

    csv_path, _ = run_sweep("lstm-minibatch", "a100", tmp_path)
    rows = list(csv.DictReader(Path(csv_path).read_text().splitlines()))
    latency_us = gpu("a100").efficiency.kernel_latency_s * 1e6
    for r in rows:
        standard, persistent = float(r["standard_us"]), float(r["persistent_us"])
        if int(r["minibatch"]) >= PERSISTENT_MAX_BATCH:
            assert math.isnan(persistent)  # cuDNN runs the standard kernels there
        else:  # one launch per sequence of S steps instead of one per step, no weight reads
            saved = latency_us * (1 - 1 / LSTM_SEQ)
            assert persistent <= standard - saved * (1 - 1e-9)


def test_persistent_rnn_reads_its_weights_once():
    from dlperf.ops.cost import CostContext
    from dlperf.ops.rnn import rnn_gemms
    from dlperf.precision import precision

    h, b, s = 1024, 32, 100
    info = {
        "mode": "LSTM",
        "hidden_size": h,
        "batch": b,
        "seq": s,
        "num_layers": 1,
        "input_size": h,
        "bidirectional": False,
    }
    ctx = CostContext(precision("fp16"))
    standard = rnn_gemms(info, "forward", ctx, torch.float16)
    persistent = rnn_gemms(info, "forward", ctx, torch.float16, persistent=True)
    (std,) = [g for g in standard if g.role == "recurrent forward"]
    (per,) = [g for g in persistent if g.role == "recurrent forward"]
    assert (std.m, std.n, std.k, std.count, std.launches) == (4 * h, b, h, s, 0)
    assert (per.m, per.n, per.k, per.count, per.launches) == (4 * h, b, h, s, 1)
    # 2-byte weights 4H x H once, then per step the input h (H x B) and the gates (4H x B)
    assert per.tensor_bytes == 2 * (4 * h * h + s * (h * b + 4 * h * b))


def test_terminal_module_table_shares_add_up_to_at_most_the_step():
    import io

    from rich.console import Console

    from dlperf.rendering.terminal import analysis_report

    a = dlperf.analyze(Nested(), torch.empty(512, 256, device="meta"), gpu="a100")
    out = io.StringIO()
    analysis_report(a, console=Console(file=out, width=200, emoji=False))
    table = out.getvalue().split("by module", 1)[1]
    cells = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    of_step = [float(c[4].strip().rstrip("%")) for c in cells if c[4].strip()]
    of_parent = [float(c[5].strip().rstrip("%")) for c in cells if c[5].strip()]
    assert of_step and of_parent  # both levels are shown
    assert sum(of_step) <= 100.0 + 0.05 * len(of_step)  # rounding of each printed share
