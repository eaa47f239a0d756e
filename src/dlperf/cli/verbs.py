"""The verbs of the `dlperf` command as data: each names its handler and the
options it takes, most of them shared groups from options.py. parser.py
builds the argument parser from this table, in this order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import handlers as do
from .options import (
    ADVICE,
    GEMM,
    JSON,
    MEASURE_COMM,
    MEMORY,
    MODEL,
    MODEL_OPTIONS,
    PLAN,
    PLAN_RUN,
    RUN_TOTALS,
    SERVE,
    SWEEP,
    TRACE,
    Option,
    device,
    option,
    optional,
    positive_int,
    top,
)


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    run: Callable  # the handler: takes the parsed arguments
    options: tuple[Option, ...] = ()
    defaults: dict = field(default_factory=dict)  # defaults that differ from the options'


WITH_MODEL = (MODEL, *MODEL_OPTIONS)
# The report's Serving section, on request (it prices a dozen batch sizes):
# a model that is not a decoder is then an error.
REPORT_SERVE = (
    option(
        "--serve",
        action="store_true",
        help="add the Serving section: latency and throughput against batch size, the memory "
        "limit marked (decoder models)",
    ),
    option("--input-len", type=positive_int, default=128, help="serving: prompt tokens"),
    option("--output-len", type=positive_int, default=128, help="serving: generated tokens"),
)

VERBS = (
    Verb(
        "gpus",
        "list the bundled GPU catalogue, or show one spec file",
        do.cmd_gpus,
        (
            option(
                "--spec",
                help="a spec file or a catalogue GPU: its facts, and what a trace calibrated",
            ),
            *JSON,
        ),
    ),
    Verb("models", "list the bundled checkpoints hf:ORG/NAME builds offline", do.cmd_models, JSON),
    Verb(
        "explain-config",
        "the dlperf run a framework's config file becomes, field by field",
        do.cmd_explain_config,
        (
            option(
                "file",
                metavar="FILE",
                help="torchtitan TOML, llm-foundry YAML, Megatron-LM "
                "arguments, TrainingArguments or config.json, vLLM arguments",
            ),
            option("--gpus", type=positive_int, help="GPUs the run has (resolves -1 degrees)"),
            *JSON,
        ),
    ),
    Verb("gemm", "predict one GEMM: C[M,N] = A[M,K] B[K,N]", do.cmd_gemm, GEMM),
    Verb(
        "analyze",
        "predict every op of a model's training or inference step",
        do.cmd_analyze,
        (
            *WITH_MODEL,
            top(15, "ops"),
            option("--depth", type=positive_int, default=2, help="module tree depth"),
            *RUN_TOTALS,
        ),
    ),
    Verb(
        "memory",
        "memory of one training step per GPU, and what fits",
        do.cmd_memory,
        (*WITH_MODEL, *MEMORY),
    ),
    Verb(
        "plan",
        "price and rank parallel plans (dp/tp/pp/cp/ep, sharding, schedule) on many GPUs",
        do.cmd_plan,
        (*WITH_MODEL, *PLAN, *RUN_TOTALS, *PLAN_RUN),
    ),
    Verb(
        "serve",
        "LLM inference with a KV cache: TTFT, TPOT, tokens/s, memory, max batch",
        do.cmd_serve,
        SERVE,
    ),
    Verb(
        "advise",
        "the guides' rules, tied to layers, with predicted gains",
        do.cmd_advise,
        (optional(MODEL), *MODEL_OPTIONS, *ADVICE),  # MODEL is optional with --list-rules
    ),
    Verb(
        "report",
        "write a self-contained HTML report",
        do.cmd_report,
        (
            *WITH_MODEL,
            option("--out", required=True, help="HTML file to write"),
            option("--no-advice", action="store_true", help="leave out the findings"),
            option(
                "--trace",
                help="add a profiler trace of the run beside the prediction (price it with "
                "--gpu as the GPU it ran on)",
            ),
            *REPORT_SERVE,
        ),
    ),
    Verb("sweep", "predicted curves that redraw the guides' figures", do.cmd_sweep, SWEEP),
    Verb(
        "measure",
        "run the model here and compare with the prediction",
        do.cmd_measure,
        (
            *WITH_MODEL,
            device("where it runs"),
            option("--steps", type=positive_int, default=3, help="profiled steps"),
            option(
                "--trace-out",
                help="write the profiled steps as a torch.profiler trace (.json or .json.gz) "
                "for compare and calibrate --trace",
            ),
        ),
        defaults={"gpu": None},  # it runs on --device; --precision auto as the others
    ),
    Verb(
        "calibrate",
        "measure this device and write a spec file",
        do.cmd_calibrate,
        (
            device("what to probe (without --trace)"),
            option("--out", required=True, help="spec file to write (TOML)"),
            option(
                "--trace",
                help="fit from this torch.profiler trace of MODEL's run instead of probing",
            ),
            option(
                "--model",
                api="model",
                help="with --trace: the model the trace ran (as analyze's MODEL), with its "
                "options below",
            ),
            *MODEL_OPTIONS,
        ),
        defaults={"gpu": None},  # with --trace: the device the trace names
    ),
    Verb("trace", "read a PyTorch profiler trace of a GPU run", do.cmd_trace, TRACE),
    Verb(
        "compare",
        "a profiler trace of your run beside the prediction, per op, module and category",
        do.cmd_compare,
        (
            *WITH_MODEL,
            option(
                "--trace",
                required=True,
                help="torch.profiler Chrome trace (.json[.gz]) of the model's run, or a "
                "folder of one per rank",
            ),
            top(10, "largest misses"),
        ),
        defaults={"gpu": None},  # the trace's own device
    ),
    Verb(
        "measure-comm",
        "time real collectives with torch.distributed",
        do.cmd_measure_comm,
        MEASURE_COMM,
    ),
)
