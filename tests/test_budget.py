"""Choosing the GPU count for a run (parallel/budget.py): time against cost,
under a deadline, with the arithmetic in the open."""

import json

import pytest

import dlperf
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.parallel.budget import parse_deadline, ranked_choices, run_choices

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
