"""The run as one value: `RunConfig`'s defaults, its validation, the verbs it
applies to, and the command line's layering of flags over --config."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import dlperf
from dlperf.cli.configured import apply_config
from dlperf.cli.parser import build_parser, given_options
from dlperf.cli.verbs import VERBS
from dlperf.errors import DlperfError
from dlperf.run import resolve
from dlperf.run_config import APPLIES, KEYWORDS, WHY_NOT, RunConfig

EXAMPLES = "examples"


def _parsed(argv: list[str]):
    args = build_parser().parse_args(argv)
    args.given = given_options(argv)
    return args


def test_every_cli_default_is_the_run_configs():
    """One set of defaults: an option the command line leaves unset is either
    None (the config's default applies) or the config's own value."""
    default = RunConfig()
    for verb in VERBS:
        for option in verb.options:
            if option.api not in KEYWORDS or option.api == "model":
                continue
            given = verb.defaults.get(option.dest, option.kwargs.get("default"))
            if given is None or option.api == "training":  # --train/--infer: a pair
                continue
            expected = default.get(option.api)
            if option.api == "gpu":  # the CLI's alias of the same card
                given, expected = dlperf.gpu(given).id, dlperf.gpu("a100-sxm4-80gb").id
            assert given == expected, (verb.name, option.flags[0], given, expected)


def test_each_verbs_cli_options_are_options_it_applies():
    """The command line offers a verb no run option that the verb would refuse."""
    for verb in VERBS:
        # measure takes the shared model options to refuse the ways of running
        # a step in words ("measure runs the model here as written")
        if verb.name not in APPLIES or verb.name == "measure":
            continue
        for option in verb.options:
            if option.api in KEYWORDS and option.api not in WHY_NOT:  # refused with a reason
                assert option.api in APPLIES[verb.name], (verb.name, option.flags[0])


def test_build_lays_keywords_over_a_base_by_group():
    base = RunConfig.build(gpu="h100", checkpoint="full")
    config = RunConfig.build(base, tp=2, checkpoint="selective")
    assert config.device.gpu == "h100"
    assert config.step.checkpoint == "selective"
    assert config.parallel.tp == 2
    assert base.step.checkpoint == "full"  # frozen: the base is unchanged
    assert config.given() == {"gpu": "h100", "checkpoint": "selective", "tp": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.step.checkpoint = "none"


def test_unknown_and_misplaced_options_are_refused_in_one_line():
    with pytest.raises(DlperfError, match="unknown run option 'gpuz'"):
        RunConfig.build(gpuz="h100")
    with pytest.raises(DlperfError, match="--tp 2 is not an option of dlperf analyze"):
        RunConfig.build(tp=2).check("analyze")
    with pytest.raises(DlperfError, match="--seed must be a whole number >= 0, not -1"):
        RunConfig.build(seed=-1).check("serve")
    with pytest.raises(DlperfError, match="--clip-grad clips a training step"):
        RunConfig.build(training=False, clip_grad=True).check()
    RunConfig.build(tp=2, sharding="fsdp").check("plan")  # a plan's own options pass


def test_the_api_takes_a_config_or_keywords_alike():
    model, x = nn.Linear(64, 64), torch.empty(8, 64, device="meta")
    config = RunConfig.build(gpu="h100", precision="amp-bf16")
    by_config = dlperf.analyze(model, x, config)
    by_keywords = dlperf.analyze(model, x, gpu="h100", precision="amp-bf16")
    second = dlperf.analyze(model, RunConfig.build(config, inputs=x))  # analyze(model, config)
    assert by_config.time_s == by_keywords.time_s == second.time_s
    assert by_config.precision == "amp-bf16" and by_config.gpu == dlperf.gpu("h100").id


def test_a_resolved_run_takes_other_step_options_and_keeps_its_model():
    model, x = nn.Linear(64, 64), torch.empty(8, 64, device="meta")
    run = resolve(model, x, gpu="h100")
    assert resolve(run) is run
    inference = resolve(run, training=False)
    assert inference.training is False and inference.module is run.module
    with pytest.raises(DlperfError, match="keeps its model and inputs"):
        resolve(run, batch=4)


def test_from_file_reads_a_framework_config_for_the_api():
    config = RunConfig.from_file(f"{EXAMPLES}/megatron_gpt_1.3b.sh", verb="plan")
    # the script: --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 4
    assert config.parallel.tp == 2
    assert config.parallel.sequence_parallel is True
    assert config.parallel.micro_batch == 4
    assert config.model.model.startswith("hf:gpt2:")


def test_a_flag_given_wins_over_the_config_whatever_its_value():
    """--precision auto is the parser's default, and still beats the file's amp-fp16."""
    path = f"{EXAMPLES}/hf_training_args.json"  # fp16: true -> amp-fp16
    from_file = _parsed(["analyze", "hf:gpt2", "--config", path])
    apply_config(from_file)
    assert from_file.precision == "amp-fp16"
    typed = _parsed(["analyze", "hf:gpt2", "--config", path, "--precision", "auto"])
    apply_config(typed)
    assert typed.precision == "auto"
    assert "precision" in typed.given and "checkpoint" not in typed.given


def test_a_resolved_run_keeps_its_options_through_plan():
    """A `Run` handed to plan brings its own config: fp32 stays fp32 (a plan priced
    with the defaults' amp-bf16 instead was a bug the e2e bench caught)."""
    model, x = nn.Sequential(nn.Linear(64, 64), nn.ReLU()), torch.empty(8, 64, device="meta")
    run = resolve(model, x, gpu="v100", precision="fp32")
    report = dlperf.plan(run, gpus=2, global_batch=16, micro_batch=8)
    assert report.precision == "fp32"


def test_an_option_given_where_the_config_goes_is_refused_in_one_line():
    model, x = nn.Linear(8, 8), torch.empty(2, 8, device="meta")
    with pytest.raises(DlperfError, match="not str 'h100': give the GPU"):
        dlperf.analyze(model, x, "h100")
