"""Choosing the GPU count for a run (parallel/budget.py): time against cost,
under a deadline, with the arithmetic in the open."""

import json

import pytest

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.parallel.budget import RunChoice, parse_deadline, ranked_choices, run_choices

MODEL = "hf:gpt2:layers=2,hidden=256,heads=4"
FIXED = dict(gpu="a100", global_batch=64, micro_batch=1, seq_len=256, tp=1, pp=1,
             sharding="none", checkpoint="none")  # fmt: skip


def test_deadlines_read_as_durations():
    assert parse_deadline("14d") == 14 * 86400
    assert parse_deadline("36h") == 36 * 3600
    assert parse_deadline("90m") == 5400
    assert parse_deadline("7200") == 7200
    with pytest.raises(DlperfError, match="a duration such as 14d"):
        parse_deadline("soon")


def test_cost_picks_fewer_gpus_than_time_and_a_deadline_can_overrule_it():
    reports = [dlperf.plan(MODEL, gpus=g, **FIXED) for g in (8, 64)]
    tokens, price = 1e9, 2.0
    choices = {c.gpus: c for c in run_choices(reports, tokens=tokens, price=price)}
    for r in reports:
        best, c = r.plans[0], choices[r.gpus]
        # the run: its tokens at the best plan's rate; its GPUs for that long
        assert c.run_s == pytest.approx(tokens / best.tokens_per_s)
        assert c.gpu_hours == pytest.approx(r.gpus * c.run_s / 3600)
        assert c.cost == pytest.approx(price * c.gpu_hours)
    eight, many = choices[8], choices[64]
    # 64 GPUs finish sooner, but each does less (a global batch of 64 gives each one
    # sample a step, and the all-reduce no longer hides): more GPU-hours
    assert many.run_s < eight.run_s and many.gpu_hours > eight.gpu_hours
    assert ranked_choices(list(choices.values()), "time")[0].gpus == 64
    assert ranked_choices(list(choices.values()), "cost")[0].gpus == 8
    # a deadline between the two: the cheaper one misses it, so cost picks 64
    deadline = (eight.run_s + many.run_s) / 2
    late = run_choices(reports, tokens=tokens, price=price, deadline_s=deadline)
    assert ranked_choices(late, "cost")[0].gpus == 64


def test_plan_json_lists_the_choices_and_the_chosen_plans(capsys):
    flags = "--gpu a100 --gpus 8,64 --global-batch 64 --micro-batch 1 --seq-len 256 --tp 1 "
    flags += "--pp 1 --sharding none --checkpoint none --tokens 1000000000 --rank cost --json"
    argv = ["plan", MODEL, *flags.split()]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rank"] == "cost" and [c["gpus"] for c in doc["choices"]] == [8, 64]
    assert doc["chosen"]["gpus"] == 8 and doc["chosen"]["plans"]
    assert doc["choices"][0]["cost"] is None  # no price: GPU-hours rank it


def test_a_cost_ranking_without_a_price_says_it_ranks_gpu_hours(capsys):
    # issue 36, item 11: the title said "by cost" above a cost column of "-"
    flags = "--gpu a100 --gpus 8,64 --global-batch 64 --micro-batch 1 --seq-len 256 --tp 1 "
    flags += "--pp 1 --sharding none --checkpoint none --tokens 1000000000 --rank cost"
    assert main(["plan", MODEL, *flags.split()]) == 0
    assert "best first by GPU-hours" in capsys.readouterr().out


def test_a_run_needs_its_length():
    reports = [dlperf.plan(MODEL, gpus=8, **FIXED)]
    with pytest.raises(DlperfError, match="--tokens N or --steps N"):
        run_choices(reports)


def test_numbers_read_in_units_that_suit_them():
    # issue 36, item 13: "0.00 kWh", "0.00 at 2", whole GPU-hours, "3.13e+03 s" beside
    # "3.41 h", "0.0 days" for a 1-minute deadline, "671,026.4 M parameters", "0.0 samples/s"
    from dlperf.rendering.terminal.format import durations, energy, parameters, seconds, sig

    assert sig(0.0123) == "0.0123" and sig(0.004) == "0.004" and sig(2115.2) == "2,115"
    assert sig(3.41) == "3.41" and sig(0) == "0" and sig(1.5) == "1.5"
    assert energy(0.5 * 3600) == "1,800 J" and energy(360) == "360 J"
    assert energy(12.3 * 3600) == "12.3 Wh" and energy(4.56e3 * 3600) == "4.56 kWh"
    assert seconds(3130) == "52.2 min" and seconds(12276) == "3.41 h"
    assert seconds(60) == "1 min" and seconds(14 * 86400) == "14 days"
    assert seconds(0.121) == "121 ms" and seconds(1.5) == "1.5 s"
    assert durations([3130, 12276]) == ["0.869 h", "3.41 h"]  # one unit a column
    assert parameters(671_026.4e6) == "671 B parameters"
    assert parameters(25.6e6) == "25.6 M parameters" and parameters(8.03e9) == "8.03 B parameters"


def test_a_run_line_shows_small_energy_and_cost_and_a_short_deadline():
    from rich.console import Console

    from dlperf.rendering.terminal.analysis import _run_line
    from dlperf.rendering.terminal.format import durations, sig
    from dlperf.rendering.terminal.parallel import run_choices as render_choices

    run = {"steps": 10, "time_s": 0.2, "energy_j": 80.0,
           "cost": {"per_run": 2 * 0.2 / 3600, "price_per_gpu_hour": 2}}  # fmt: skip
    line = _run_line(run)
    assert "80 J per GPU" in line and "0.000111 at 2 a GPU-hour" in line, line
    reports = [dlperf.plan(MODEL, gpus=g, **FIXED) for g in (8, 64)]
    choices = run_choices(reports, tokens=1e7, price=2.0, deadline_s=60)
    doc = {"deadline_s": 60.0, "rank": "cost", "choices": [c.to_dict() for c in choices],
           "chosen": reports[0]}  # fmt: skip
    console = Console(width=300, record=True)
    render_choices(doc, console=console)
    out = console.export_text()
    assert "(deadline 1 min)" in out
    runs = durations([c.run_s for c in choices])
    assert len({r.split()[1] for r in runs}) == 1  # the run column in one unit
    for row, run in zip(out.split("best plan")[1].splitlines()[2:4], runs, strict=True):
        assert f" {run} " in row, out
    assert "e+0" not in out
    for c in choices:
        assert sig(c.gpu_hours) in out  # GPU-hours to 3 significant digits, not whole


def test_steps_of_plans_with_different_global_batches_are_refused_and_ties_go_faster():
    """Without --global-batch each count's plan steps its own batch (dp x micro): 1,000
    steps on 8 GPUs and on 16 are different amounts of work, refused; with the same
    batch they compare, and of two equally cheap runs the faster ranks first."""
    free = {k: v for k, v in FIXED.items() if k != "global_batch"}
    reports = [dlperf.plan(MODEL, gpus=g, **free) for g in (8, 16)]
    with pytest.raises(DlperfError, match="different amounts of work"):
        run_choices(reports, steps=1000)
    slow = RunChoice(8, "a", 1.0, 100.0, 10.0, None, True)
    fast = RunChoice(16, "b", 0.5, 50.0, 10.0, None, True)
    assert [c.gpus for c in ranked_choices([slow, fast], "cost")] == [16, 8]
