"""The HTML report (in a real headless browser when one is installed) and sweeps."""

import csv
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.cli import main
from dlperf.rendering.sweeps import SWEEPS, run_sweep

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
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,3000"):
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
