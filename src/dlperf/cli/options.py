"""The command line's options as data: argument types, and the groups of
options that verbs share (model, output, plan ...). verbs.py combines them."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

from ..dtypes import DTYPES
from ..errors import DlperfError
from ..optimizer import OPTIMIZERS
from ..precision import AUTO, POLICIES, SPARSITIES
from ..run_config import (
    ATTENTION,
    MOE_DISPATCHERS,
    REDUCE_DTYPES,
    SAMPLERS,
    SHARDINGS,
    RunConfig,
)
from ..tracing.losses import LOSSES


@dataclass(frozen=True)
class Option:
    """One argparse argument: its flags (or positional name) and keywords.

    `api` names the keyword of the public API (`dlperf.analyze`, `run.resolve`
    ...) that the option's value feeds; `exclusive` names a group of options
    that exclude each other, like --train and --infer.
    """

    flags: tuple[str, ...]
    kwargs: dict
    api: str | None = None
    exclusive: str | None = None

    @property
    def dest(self) -> str:
        """The attribute that holds the option's value in the parsed arguments."""
        return self.kwargs.get("dest") or self.flags[0].lstrip("-").replace("-", "_")


def option(*flags: str, api: str | None = None, exclusive: str | None = None, **kwargs) -> Option:
    return Option(flags, kwargs, api, exclusive)


def optional(positional: Option) -> Option:
    """A positional argument that may be left out."""
    return replace(positional, kwargs={**positional.kwargs, "nargs": "?"})


# -- argument types -----------------------------------------------------------


def whole_number(text: str) -> int:
    """An integer, written plainly or as a number with nothing after the point
    (1e9, 2.0: what a user types for a billion tokens)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or number != number.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if number.adjusted() > 18:  # int() of 1e999999999 would build a billion digits
        raise argparse.ArgumentTypeError(f"{text} is too large")
    return int(number)


def positive_int(text: str) -> int:
    value = whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def fraction(text: str) -> float:
    """A share in (0, 1], such as --gpu-memory-utilization 0.9."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} must be a fraction in (0, 1]")
    return value


def gpu_counts(text: str) -> list[int]:
    """--gpus of plan: one count, or several separated by commas."""
    counts = [positive_int(part) for part in text.split(",")]
    twice = next((c for i, c in enumerate(counts) if c in counts[:i]), None)
    if twice is not None:
        raise argparse.ArgumentTypeError(f"{text} names {twice} twice: give each count once")
    return counts


def byte_sizes(text: str) -> list[int]:
    """--sizes of measure-comm: comma-separated positive byte counts (1e6 allowed)."""
    try:
        sizes = [int(float(s)) for s in text.split(",")]
    except ValueError:
        raise DlperfError(
            f"--sizes {text!r} is not a comma-separated list of byte counts"
        ) from None
    if any(s <= 0 for s in sizes):
        raise DlperfError("--sizes must be positive byte counts")
    return sizes


# -- shared groups ------------------------------------------------------------

GPU_HELP = "catalogue id, alias, spec file, or 'cpu'"
# How the card is run: they configure the --gpu spec (`hardware.gpu`).
DEVICE_SETTINGS = (
    option(
        "--power-limit",
        api="power_limit",
        type=positive_float,
        metavar="W",
        help="cap the card at W watts (nvidia-smi -pl): the clock drops to what W feeds",
    ),
    option(
        "--torch-version",
        api="torch_version",
        metavar="X.Y",
        help="the PyTorch whose kernels run (SDPA's backend order; default: the installed one)",
    ),
    option(
        "--cuda-context",
        api="cuda_context_mib",
        type=positive_float,
        metavar="MIB",
        help="the CUDA context your driver and PyTorch take, in MiB (nvidia-smi after the "
        "first CUDA call; default 500, lazy module loading)",
    ),
)
JSON = (option("--json", action="store_true", help="print one JSON document"),)


def top(default: int, what: str) -> Option:
    return option("--top", type=positive_int, default=default, help=f"{what} to list")


def device(helps: str) -> Option:
    return option("--device", default="cpu", choices=["cpu", "cuda"], help=helps)


MODEL = option(
    "model",
    api="model",
    metavar="MODEL",
    nargs="?",
    help="torchvision:NAME, hf:NAME, hf:ORG/NAME (bundled: `dlperf models`), "
    "hf:path/to/config.json, timm:NAME or path/to/file.py:factory (a file runs your code); "
    "may come from --config",
)
CONFIG = option(
    "--config",
    metavar="FILE",
    help="the run as a framework's config writes it: torchtitan TOML, llm-foundry YAML, "
    "Megatron-LM arguments, TrainingArguments or config.json, vLLM arguments (flags given "
    "beside it win; `dlperf explain-config FILE` shows the translation)",
)
# The GPU a run is predicted on, how it runs, and the run's config file.
DEVICE = (option("--gpu", api="gpu", default="a100", help=GPU_HELP), *DEVICE_SETTINGS, CONFIG)
# Every verb that takes a model takes these; each feeds the API keyword `api`.
MODEL_OPTIONS = (
    *DEVICE,
    option(
        "--precision",
        api="precision",
        default=AUTO,
        choices=[*POLICIES, AUTO],
        help="auto: amp-bf16 where the GPU has bf16 math, else amp-fp16, else fp32; fp32 on a CPU",
    ),
    option(
        "--train",
        api="training",
        exclusive="mode",
        dest="train",
        action="store_true",
        default=True,
        help="forward, backward and optimizer step (default)",
    ),
    option("--infer", exclusive="mode", dest="train", action="store_false", help="forward only"),
    option(
        "--input",
        api="inputs",
        action="append",
        metavar="SHAPE",
        help="input shape like 8x3x224x224 or 4x128:int64 (repeatable)",
    ),
    option(
        "--batch",
        api="batch",
        type=positive_int,
        help="batch size of the default inputs (default: 32 images or 8 sequences; "
        "a model file's own)",
    ),
    option(
        "--seq-len",
        api="seq_len",
        type=positive_int,
        help="sequence length of the default inputs (default: 512, or the model's "
        "positions if fewer)",
    ),
    option(
        "--optimizer",
        api="optimizer",
        default="adamw",
        choices=list(OPTIMIZERS),
        help="optimizer the step is costed with",
    ),
    option(
        "--attention",
        api="attention",
        default="auto",
        choices=list(ATTENTION),
        help="attention kernel: auto picks what the run's PyTorch SDPA picks on the GPU; "
        "flash = flash2 (FlashAttention-2), flash3 (FlashAttention-3, Hopper), flash1 "
        "(flash-attn 1.x), triton (flash-attn's Triton kernel); eager runs the model's own "
        "attention code",
    ),
    option(
        "--checkpoint",
        api="checkpoint",
        metavar="POLICY",
        help="activation checkpointing: none, full (every repeated block), selective "
        "(the attention core), every:K (segments of K blocks) (default: none; plan searches "
        "none, selective and full)",
    ),
    option(
        "--loss",
        api="loss",
        default="eager",
        choices=list(LOSSES),
        help="a language model's loss: eager (its own code: fp32 logits), fused (a fused "
        "cross-entropy kernel on the logits as they are), chunked (a chunked linear "
        "cross-entropy: never the whole logits)",
    ),
    option(
        "--kernels",
        api="kernels",
        default="eager",
        choices=["eager", "te"],
        help="the layers' kernels as saved for backward: eager (the model's own ops) or te "
        "(Megatron-Core with Transformer Engine: fused norms keep their input and statistics, "
        "a fused SwiGLU its inputs, fp8 linear layers their fp8 input)",
    ),
    option(
        "--sparsity",
        api="sparsity",
        choices=list(SPARSITIES),
        help="prune the linear layers' weights 2:4 and run their GEMMs on the sparse Tensor "
        "Cores (Ampere and later): a what-if, pruning changes the outputs",
    ),
    option(
        "--reduce-dtype",
        api="reduce_dtype",
        choices=list(REDUCE_DTYPES),
        help="plan: the dtype sharded data parallelism reduce-scatters gradients in (default "
        "fp32, as FSDP2 and torchtitan; bf16 as FSDP's PURE mixed precision)",
    ),
    option(
        "--compile",
        api="compile",
        action="store_true",
        help="price the step as torch.compile runs it (fused element-wise chains)",
    ),
    option(
        "--channels-last",
        api="channels_last",
        action="store_true",
        help="the model and its image inputs run NHWC (model.to(memory_format="
        "torch.channels_last)), as NVIDIA's AMP recipes train CNNs",
    ),
    option(
        "--clip-grad",
        api="clip_grad",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the step clips the gradients' norm (clip_grad_norm_, as Hugging Face's Trainer, "
        "torchtitan and Megatron-LM do by default; --no-clip-grad where a --config clips)",
    ),
    option(
        "--cuda-graphs",
        api="cuda_graphs",
        action="store_true",
        help="the step is captured in CUDA graphs: no per-op launch cost",
    ),
    *JSON,
)


def run_options(args: argparse.Namespace, omit: tuple[str, ...] = ()) -> dict:
    """The run options the verb's parsed arguments hold, as `RunConfig.build`'s
    keywords (an option left unset is the config's default), less `omit`."""
    given = device_settings(args)
    if given and getattr(args, "gpu", "") is None:  # the device at hand, or the one a trace names
        raise DlperfError(
            f"{next(iter(given))} configures a predicted --gpu: give --gpu with it, or drop it"
        )
    found = {o.api: getattr(args, o.dest, None) for o in args.verb_options if o.api}
    return {k: v for k, v in found.items() if v is not None and k not in omit}


def run_config(args: argparse.Namespace, **changes) -> RunConfig:
    """The run the command line (over its --config) describes, with `changes`."""
    return RunConfig.build(**{**run_options(args), **changes})


def device_settings(args: argparse.Namespace) -> dict:
    """The DEVICE_SETTINGS given on the command line: {flag: value}."""
    flags = (o.flags[0] for o in DEVICE_SETTINGS)
    found = {flag: getattr(args, flag[2:].replace("-", "_"), None) for flag in flags}
    return {flag: value for flag, value in found.items() if value is not None}


GEMM = (
    option("m", type=positive_int, metavar="M"),
    option("n", type=positive_int, metavar="N"),
    option("k", type=positive_int, metavar="K"),
    option("--gpu", default="a100", help=GPU_HELP),
    *DEVICE_SETTINGS,
    option("--dtype", default="fp16", choices=DTYPES),
    option("--batch", type=positive_int, default=1, help="batched GEMM count"),
    *JSON,
)

MEMORY = (
    option(
        "--accumulate",
        type=positive_int,
        default=1,
        help="gradient accumulation: micro-batches per step",
    ),
    option(
        "--fit",
        action="store_true",
        help="also find the largest batch (and sequence length) that fits",
    ),
)

PLAN = (
    option(
        "--gpus",
        type=gpu_counts,
        help="GPUs in all (default: 8); several (8,16,32) to choose among for a run "
        "(--tokens or --steps, --rank, --deadline)",
    ),
    option(
        "--gpus-per-node", api="gpus_per_node", type=positive_int, default=8, help="GPUs per node"
    ),
    option("--nodes", type=positive_int, help="nodes (sets --gpus with --gpus-per-node)"),
    option(
        "--global-batch",
        api="global_batch",
        type=positive_int,
        help="samples per optimizer step (default: 4 x GPUs x micro-batch)",
    ),
    option(
        "--micro-batch",
        api="micro_batch",
        type=positive_int,
        help="samples per forward pass (default: --batch, else the --input batch, else 1)",
    ),
    option(
        "--node-network-gbps",
        type=positive_float,
        help="inter-node bandwidth per node in Gb/s (default: the GPU generation's DGX: "
        "8 x 400 Hopper and Blackwell, 8 x 200 Ampere, 4 x 100 Volta)",
    ),
    option("--dp", api="dp", type=positive_int, help="data-parallel degree (default: searched)"),
    option("--tp", api="tp", type=positive_int, help="tensor-parallel degree (default: searched)"),
    option(
        "--pp", api="pp", type=positive_int, help="pipeline-parallel degree (default: searched)"
    ),
    option(
        "--cp",
        api="cp",
        type=positive_int,
        help="context-parallel degree: ring attention over the sequence (default: searched)",
    ),
    option(
        "--ep",
        api="ep",
        type=positive_int,
        help="expert-parallel degree, MoE models, out of the dp ranks (default: searched)",
    ),
    option(
        "--sharding",
        api="sharding",
        choices=list(SHARDINGS),
        help="sharding over data parallelism: zero1 (optimizer states), zero2 (and "
        "gradients), fsdp = ZeRO-3 (and weights), hsdp (fsdp within a node, replicas "
        "across) (default: searched)",
    ),
    option(
        "--schedule",
        api="schedule",
        metavar="SCHEDULE",
        help="pipeline schedule: gpipe, 1f1b or interleaved:V (default: searched)",
    ),
    option(
        "--sequence-parallel",
        api="sequence_parallel",
        action="store_true",
        default=None,
        exclusive="sequence-parallel",
        help="Megatron sequence parallelism beside tp (default: searched)",
    ),
    option(
        "--no-sequence-parallel",
        dest="sequence_parallel",
        api="sequence_parallel",
        action="store_false",
        default=None,
        exclusive="sequence-parallel",
        help="tp without sequence parallelism (default: searched)",
    ),
    option(
        "--moe-dispatcher",
        api="moe_dispatcher",
        choices=list(MOE_DISPATCHERS),
        help="how expert parallelism moves tokens: alltoall (NCCL's, the default) or flex "
        "(DeepEP, HybridEP: a token crosses to another node once for all its experts there)",
    ),
    option(
        "--cuda-graph-scope",
        api="cuda_graph_scope",
        help="what --cuda-graphs holds: full (the whole step, the default) or Megatron-Core's "
        "--cuda-graph-scope modules joined by '+' (attn, mlp, moe, moe_router, "
        "moe_preprocess); the experts outside it are issued by the host, expert by expert",
    ),
    option(
        "--overlap-ep-comm",
        api="overlap_ep_comm",
        action="store_true",
        help="run the experts' all-to-alls beside another micro-batch's compute of "
        "the layer, as Megatron-Core's --overlap-moe-expert-parallel-comm pairs them (--ep > 1)",
    ),
    option(
        "--offload-layers",
        api="offload_layers",
        type=whole_number,
        metavar="N",
        help="offload the saved activations of N blocks to host memory in forward and bring "
        "them back for backward, the copies overlapped with compute (Megatron-Core's "
        "--cpu-offloading-num-layers; pp 1, no recompute, no CUDA graphs)",
    ),
    top(12, "plans"),
    option(
        "--interconnect",
        metavar="FILE",
        help="measured interconnect (JSON from `dlperf measure-comm --out`)",
    ),
)

# A training run's length and price: its time, energy and cost (analyze).
RUN_TOTALS = (
    option(
        "--steps",
        type=positive_int,
        exclusive="run-length",
        help="the run's steps: its time, energy and cost",
    ),
    option(
        "--tokens",
        type=positive_int,
        exclusive="run-length",
        help="the run's tokens (instead of --steps)",
    ),
    option(
        "--price-per-gpu-hour",
        type=positive_float,
        metavar="PRICE",
        help="what one GPU-hour costs: cost per step, per run and per million tokens "
        "(default: none, energy only)",
    ),
)

# plan: the run to choose GPUs for (with RUN_TOTALS' --tokens/--steps and price).
PLAN_RUN = (
    option(
        "--rank",
        choices=["time", "cost"],
        help="choose the GPU count (--gpus 8,16,...) by the run's time or its cost (GPU-hours "
        "at --price-per-gpu-hour) (default: time)",
    ),
    option("--deadline", metavar="DURATION", help="the run must end within it: 14d, 36h, 90m"),
)

APPLY_HELP = "apply these automatic fixes and print the predicted before/after"
ADVICE = (
    option("--list-rules", action="store_true", help="list the rules and their sources"),
    option("--rules", help="comma-separated rule ids to run (default: all)"),
    option("--apply", metavar="RULE[,RULE]", help=APPLY_HELP),
)

SWEEP = (
    option("name", nargs="?", help="a sweep name, or 'all' (see --list)"),
    option("--list", action="store_true", help="list the sweeps"),
    option("--gpu", help="catalogue id (default: the GPU of the guide's figure)"),
    option("--out", default="sweeps", help="folder for NAME.csv and NAME.svg"),
    *JSON,
)

TRACE = (
    option("path", help="Chrome trace JSON written by torch.profiler (.json or .json.gz)"),
    option("--gpu", help="the GPU it ran on (default: read from the trace)"),
    top(15, "rows"),
    *JSON,
)

MEASURE_COMM = (
    option("--nproc", type=positive_int, default=2, help="worker processes"),
    option("--backend", default="gloo", choices=["gloo", "nccl"], help="collectives"),
    option("--sizes", help="comma-separated buffer sizes in bytes"),
    option("--repeats", type=positive_int, default=5, help="timed calls per size"),
    option("--out", help="write the fitted interconnect (JSON) for `dlperf plan`"),
    *JSON,
)


def rate(text: str) -> float:
    """--request-rate: requests per second, or inf (all at once)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive_float(text)


def probability(text: str) -> float:
    """A share in [0, 1), such as --prefix-cache-hit-rate 0.5."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be in [0, 1)")
    return value


# A serving benchmark instead of one static batch (`serving.simulate`).
SIMULATION = (
    option(
        "--request-rate",
        api="request_rate",
        type=rate,
        metavar="R",
        help="simulate a serving benchmark: requests per second arriving as a Poisson "
        "process (inf: all at once, the default of a simulation)",
    ),
    option(
        "--stages",
        api="stages",
        metavar="RATExSECONDS,...",
        help="a staged load, as inference-perf's constant load type: each stage sends "
        "int(rate x seconds) requests (8x600,20x600: 8/s for 10 minutes, then 20/s); the "
        "JSON gives each stage's latencies in stages[]",
    ),
    option(
        "--num-prompts",
        api="num_prompts",
        type=positive_int,
        metavar="N",
        help="requests simulated (1000; a FILE.jsonl with arrival_s: its lines)",
    ),
    option(
        "--dataset",
        api="dataset",
        metavar="SPEC",
        help="request lengths: random:in=I,out=O[,range=F] (default random:in=1024,out=128), "
        "shared-prefix:system=S,question=Q,output=O,groups=G,users=U[,extra=E] (G system "
        "prompts each shared by U users, held in the prefix cache), FILE.jsonl ({input_len, "
        "output_len[, arrival_s]} per line) or FILE.json (a histogram)",
    ),
    option(
        "--max-num-seqs",
        api="max_num_seqs",
        type=positive_int,
        help="sequences per engine step at most "
        "(default: vLLM's, 1024 on GPUs of 70 GiB or more except the A100, else 256)",
    ),
    option(
        "--max-model-len",
        api="max_model_len",
        type=positive_int,
        metavar="N",
        help="tokens a request may hold, prompt and output, as vLLM's --max-model-len "
        "(default: the model's positions)",
    ),
    option(
        "--no-chunked-prefill",
        action="store_true",
        help="prompts run whole in steps of their own (vLLM V0's default scheduler)",
    ),
    option(
        "--no-async-scheduling",
        action="store_true",
        help="schedule each step after the last one ends, as vLLM's --no-async-scheduling "
        "(default: the next step is scheduled while one runs, so a request that arrives "
        "mid-step waits for the step after next)",
    ),
    option(
        "--prefix-cache-hit-rate",
        api="prefix_cache_hit_rate",
        type=probability,
        default=0.0,
        metavar="H",
        help="share of each prompt found in the prefix cache (default: 0)",
    ),
    option(
        "--enforce-eager",
        action="store_true",
        help="the simulated engine launches every kernel (default: CUDA graphs, as vLLM)",
    ),
    option(
        "--slo",
        api="slo",
        metavar="LIMITS",
        help="latency limits for goodput, like ttft=500ms,tpot=50ms",
    ),
    option(
        "--find-max-rate",
        api="find_max_rate",
        action="store_true",
        help="search the largest request rate whose P99 latencies meet --slo",
    ),
    option(
        "--seed", api="seed", type=int, default=0, help="seed of the lengths and arrivals drawn"
    ),
)

SERVE = (
    MODEL,
    *DEVICE,
    option(
        "--precision",
        api="precision",
        default=AUTO,
        choices=[AUTO, "fp16", "bf16", "fp8", "int8", "int8-weight", "int4-weight"],
        help="weights and GEMMs: fp16/bf16, fp8 (Hopper+), int8 (W8A8), int8/int4 weight-only; "
        "auto: fp16",
    ),
    option(
        "--input-len",
        api="input_len",
        type=positive_int,
        help="prompt tokens per request (default: 128)",
    ),
    option(
        "--output-len",
        api="output_len",
        type=positive_int,
        help="generated tokens per request (default: 128)",
    ),
    option(
        "--batch",
        api="batch",
        type=positive_int,
        help="requests served as one static batch (default: 1)",
    ),
    option(
        "--input",
        metavar="SHAPE",
        help="the prompts' token ids as BATCHxINPUT_LEN, like 8x128 (instead of --batch and "
        "--input-len)",
    ),
    option("--tp", api="tp", type=positive_int, help="tensor-parallel GPUs (default: 1)"),
    option("--pp", api="pp", type=positive_int, help="pipeline-parallel stages (default: 1)"),
    option(
        "--sampling",
        api="sampling",
        default="greedy",
        choices=list(SAMPLERS),
        help="how each token is chosen: greedy (benchmarks' default) or top-p (vLLM's sorter)",
    ),
    option(
        "--quant-group",
        api="quant_group",
        type=positive_int,
        metavar="G",
        help="weights per scale (and zero) of int8-weight/int4-weight (default: 128)",
    ),
    option(
        "--kv-cache-dtype",
        api="kv_cache_dtype",
        choices=["fp16", "bf16", "fp8", "int8"],
        help="KV cache storage (default: the precision's base dtype)",
    ),
    option(
        "--concurrency",
        api="concurrency",
        type=positive_int,
        help="also price in-flight batching with this many requests in flight",
    ),
    option(
        "--cuda-graphs",
        api="cuda_graphs",
        action="store_true",
        help="each step is replayed from a CUDA graph: no per-kernel launch cost",
    ),
    option(
        "--attention",
        api="attention",
        default="auto",
        choices=list(ATTENTION),
        help="attention kernel: auto as PyTorch's SDPA picks; math: batched GEMMs and a "
        "softmax kernel (engines without fused attention)",
    ),
    option(
        "--gpus-per-node", api="gpus_per_node", type=positive_int, default=8, help="GPUs per node"
    ),
    option(
        "--max-num-batched-tokens",
        api="max_num_batched_tokens",
        type=positive_int,
        metavar="T",
        help="tokens one engine step runs at most; activations are reserved for them "
        "(default: vLLM's, 8192 on GPUs of 70 GiB or more except the A100, else 2048)",
    ),
    option(
        "--gpu-memory-utilization",
        api="gpu_memory_utilization",
        type=fraction,
        default=0.9,
        metavar="F",
        help="share of each GPU's memory the engine may use (default: 0.9, as vLLM)",
    ),
    option(
        "--cpu-offload-gb",
        api="cpu_offload_gb",
        type=float,
        default=0.0,
        metavar="GIB",
        help="GiB of weights per GPU kept in CPU memory, as vLLM's --cpu-offload-gb: frees "
        "that much GPU memory for the KV cache and reads it over the host link (PCIe or "
        "NVLink-C2C) in every forward (default: 0)",
    ),
    option(
        "--block-size",
        api="block_size",
        type=positive_int,
        default=16,
        help="tokens per KV cache block, as vLLM takes them (1, 8, 16, 32, 64 or 128); a "
        "sequence holds whole blocks (default: 16)",
    ),
    option(
        "--speculative-config",
        api="speculative",
        metavar="JSON",
        help='speculative decoding what-if, as vLLM takes it: {"method": "ngram" or '
        '"draft_model", "model": DRAFT, "num_speculative_tokens": K, "acceptance_rate": A}',
    ),
    *SIMULATION,
    *JSON,
)
