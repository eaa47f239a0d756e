"""The run as one value: `RunConfig`, what every verb of dlperf takes.

A run is described once, by concern: the model and its inputs, the device,
the precision, the step as it runs (checkpointing, compile, attention, loss,
optimizer), the parallel plan and the serving engine. Each field has its one
default here; `RunConfig.build` makes a config from flat keywords (the
public API's, `analyze(model, gpu="h100", checkpoint="full")`) laid over a
base config, `RunConfig.from_file` from a framework's config file, and
`check` validates it in one pass, with a one-line error for a bad value and
for an option the verb has no use for (`APPLIES`).

Validation here is about the values alone; what needs the model or the GPU
(a checkpoint policy past the model's blocks, CUDA graphs on a CPU spec) is
checked where those are resolved (`run.resolve`, `serving.deployment`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields

from .configs import read_config
from .configs.megatron import CUDA_GRAPH_SCOPES
from .errors import DlperfError
from .kernels.attention_backends import ATTENTION_CHOICES
from .optimizer import get_optimizer
from .precision import AUTO
from .tracing.losses import LOSSES

# The --attention choices: auto, the registered kernels and their aliases, eager.
ATTENTION = ATTENTION_CHOICES
# The dtypes sharded data parallelism reduces gradients in: FSDP2's and
# torchtitan's default fp32, or bf16 (FSDP's PURE mixed precision).
REDUCE_DTYPES = ("fp32", "bf16")
SHARDINGS = ("none", "zero1", "zero2", "fsdp", "hsdp")
SAMPLERS = ("greedy", "top-p")
KERNELS = ("eager", "te")
DEFAULT_GPU = "a100-sxm4-80gb"


@dataclass(frozen=True)
class ModelConfig:
    """The model and its inputs: a name, an nn.Module or a loaded model; the
    inputs as tensors or shapes, or the model's own sized by batch and seq_len."""

    model: object = None
    inputs: object = None
    batch: int | None = None
    seq_len: int | None = None
    channels_last: bool = False  # the model and its image inputs laid out NHWC


@dataclass(frozen=True)
class DeviceConfig:
    """The GPU (a catalogue name, a spec file, "cpu" or a HardwareSpec) and how
    it is run. None: `DEFAULT_GPU` for a prediction, the device at hand for
    `measure`, the GPU a trace names for `compare` and `calibrate`."""

    gpu: object = None
    power_limit: float | None = None  # watts (nvidia-smi -pl)
    torch_version: str | None = None  # the PyTorch whose kernels run
    cuda_context_mib: float | None = None  # the CUDA context the user's driver takes


@dataclass(frozen=True)
class PrecisionConfig:
    """auto: amp-bf16 where the GPU has bf16 math, else amp-fp16, else fp32 (fp32
    on a CPU); serving's auto is fp16, an engine's half-precision default."""

    precision: object = AUTO
    sparsity: str | None = None  # "2:4": the linear layers pruned


@dataclass(frozen=True)
class StepConfig:
    """The step as it runs."""

    training: bool = True
    optimizer: str = "adamw"
    attention: str = "auto"
    # None: not chosen; one GPU's step then recomputes nothing and a plan searches
    checkpoint: str | None = None
    compile: bool = False
    cuda_graphs: bool = False
    loss: str = "eager"  # how a language model's loss runs (`tracing.losses`)
    # the layers' kernels: the model's own ops (eager) or Megatron-Core with
    # Transformer Engine's fused ones, as saved for backward (`training_memory.fused`)
    kernels: str = "eager"
    clip_grad: bool = False  # clip_grad_norm_ before the optimizer step


@dataclass(frozen=True)
class ParallelConfig:
    """The plan over many GPUs; a degree left None is searched (serving: 1)."""

    gpus: int = 8
    gpus_per_node: int = 8
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    sharding: str | None = None
    schedule: str | None = None
    sequence_parallel: bool | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    reduce_dtype: str | None = None  # how sharded gradients are reduced (default fp32)
    # blocks whose saved activations live in host memory between their forward and
    # backward (Megatron-Core's --cpu-offloading-num-layers)
    offload_layers: int | None = None
    # the experts' all-to-alls hidden behind another micro-batch's compute
    # (Megatron-Core's --overlap-moe-expert-parallel-comm)
    overlap_ep_comm: bool = False
    # how the experts' tokens are dispatched (Megatron-Core's
    # --moe-token-dispatcher-type): alltoall, or flex (DeepEP, HybridEP)
    moe_dispatcher: str | None = None
    # what the step's CUDA graphs hold (with --cuda-graphs): the whole step
    # ("full", the default) or Megatron-Core's --cuda-graph-scope modules joined
    # by "+"; the MoE experts outside it are issued by the host (`expert_host`)
    cuda_graph_scope: str | None = None
    node_network_bytes_per_s: float | None = None
    measured_interconnect: dict | None = field(default=None, hash=False)


# Megatron-Core's token dispatchers: NCCL's all-to-all, or the flex one (DeepEP,
# HybridEP) that sends a token to another node once for all its experts there.
MOE_DISPATCHERS = ("alltoall", "flex")
# The KV cache block sizes vLLM's CacheConfig takes (its BlockSize literal).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
# The most requests one simulation sends. They stream through the engine (drawn
# as they arrive, held only while queued or running: `serving.scheduler`), so
# memory does not grow with the count, but time does: about 20 s per 10^5
# requests of a small model on a 2-core machine, so 10^7 take over half an
# hour, while the percentiles settle within a few thousand.
MAX_PROMPTS = 10**7


@dataclass(frozen=True)
class ServingConfig:
    """The serving engine (vLLM's settings) and, for a simulation, its load."""

    input_len: int | None = None  # a static batch's prompt tokens (default 128)
    output_len: int | None = None  # and generated tokens (default 128)
    concurrency: int | None = None
    kv_cache_dtype: str | None = None
    quant_group: int | None = None
    sampling: str = "greedy"
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    # GiB of weights per GPU held in CPU memory, read over the host link every forward
    # (vLLM's --cpu-offload-gb)
    cpu_offload_gb: float = 0.0
    block_size: int = 16
    speculative: object = field(default=None, hash=False)
    max_num_seqs: int | None = None
    max_model_len: int | None = None  # tokens a request may hold (default: the model's positions)
    chunked_prefill: bool = True
    # vLLM's async scheduling (its default): the next step is scheduled while one runs
    async_scheduling: bool = True
    scheduler: str | None = None  # a registered policy (serving.scheduler); None: chunked_prefill
    prefix_cache_hit_rate: float = 0.0
    dataset: str | None = None
    num_prompts: int | None = None
    request_rate: float | None = None
    stages: str | None = None  # constant loads, "RATExSECONDS,...": "8x600,20x600"
    slo: object = None
    find_max_rate: bool = False
    seed: int = 0

    @property
    def simulated(self) -> bool:
        """Whether a serving benchmark is simulated rather than one static batch."""
        return bool(
            self.request_rate or self.num_prompts or self.dataset or self.slo or self.find_max_rate
            or self.stages
        )


GROUPS = {
    "model": ModelConfig,
    "device": DeviceConfig,
    "precision": PrecisionConfig,
    "step": StepConfig,
    "parallel": ParallelConfig,
    "serving": ServingConfig,
}
# Each keyword of the public API, by the group that holds it.
KEYWORDS = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}



def _names(kind) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))


# The options each verb reads; any other option set is refused (`RunConfig.check`).
ONE_GPU = (*_names(ModelConfig), *_names(DeviceConfig), *_names(PrecisionConfig),
           *_names(StepConfig))  # fmt: skip
APPLIES = {
    "analyze": ONE_GPU,
    "memory": ONE_GPU,
    "advise": ONE_GPU,
    "plan": (*ONE_GPU, *_names(ParallelConfig)),
    "serve": (
        "model", "batch", *_names(DeviceConfig), "precision", *_names(ServingConfig),
        "attention", "cuda_graphs", "tp", "pp", "gpus_per_node", "node_network_bytes_per_s",
    ),
    # the model as written, run here: no way of running it other than eagerly
    "measure": ("model", "inputs", "batch", "seq_len", "gpu", "precision", "training"),
}  # fmt: skip
# Why an option is refused on one GPU's verbs, where the generic line says too little.
WHY_NOT = {
    "reduce_dtype": "is how data parallelism reduces the gradients, and one GPU's step reduces "
    "none: give it to dlperf plan, or drop it",
    "moe_dispatcher": "dispatches expert parallelism's tokens, which only a plan has: give it "
    "to dlperf plan, or drop it",
    "overlap_ep_comm": "overlaps expert parallelism's all-to-alls, which only a plan has: give "
    "it to dlperf plan, or drop it",
    "cuda_graph_scope": "says which of a Megatron-Core step's modules the graphs hold, which "
    "dlperf plan prices: give it to dlperf plan, or drop it",
    "offload_layers": "is priced by dlperf plan (Megatron-Core's activation offloading): give it "
    "to dlperf plan, or drop it",
}


@dataclass(frozen=True)
class RunConfig:
    """A run as one value (module docstring); build one with `RunConfig.build`."""

    model: ModelConfig = ModelConfig()
    device: DeviceConfig = DeviceConfig()
    precision: PrecisionConfig = PrecisionConfig()
    step: StepConfig = StepConfig()
    parallel: ParallelConfig = ParallelConfig()
    serving: ServingConfig = ServingConfig()

    @classmethod
    def build(cls, base: RunConfig | None = None, **keywords) -> RunConfig:
        """`base` (the defaults when None) with `keywords` laid over it: each
        keyword names a field of one group (`KEYWORDS`)."""
        unknown = sorted(set(keywords) - set(KEYWORDS))
        if unknown:
            raise DlperfError(
                f"unknown run option {unknown[0]!r}; the options are: {', '.join(KEYWORDS)}"
            )
        config = base or cls()
        by_group: dict[str, dict] = {}
        for name, value in keywords.items():
            by_group.setdefault(KEYWORDS[name], {})[name] = value
        changed = {
            group: dataclasses.replace(getattr(config, group), **values)
            for group, values in by_group.items()
        }
        return dataclasses.replace(config, **changed)

    @classmethod
    def from_file(cls, path, verb: str = "analyze", gpus: int | None = None) -> RunConfig:
        """The run a framework's config file describes (torchtitan, llm-foundry,
        Megatron-LM, Hugging Face, vLLM: `configs.read_config`), for `verb`."""
        return cls.build(**read_config(path, gpus=gpus).run_options(verb))

    def get(self, name: str):
        """A field by its keyword, whatever its group."""
        return getattr(getattr(self, KEYWORDS[name]), name)

    def given(self) -> dict:
        """The keywords whose value is not the default: {name: value}."""
        default = RunConfig()
        return {
            name: self.get(name)
            for name in KEYWORDS
            if not _same(self.get(name), default.get(name))
        }

    def check(self, verb: str | None = None) -> RunConfig:
        """Every value checked in one pass, and (with `verb`) every option set
        that the verb has no use for refused; returns the config."""
        _check_values(self)
        if verb is not None:
            for name, value in self.given().items():
                if name not in APPLIES[verb]:
                    flag = "--" + name.replace("_", "-")
                    why = WHY_NOT.get(name, f"is not an option of dlperf {verb}: drop it")
                    raise DlperfError(f"{flag} {_text(value)} {why}")
        return self

    def described(self) -> dict:
        """The options set, by their place in the config: {"step.checkpoint": "full"}."""
        return {f"{KEYWORDS[k]}.{k}": _json_value(v) for k, v in self.given().items()}

    def to_dict(self) -> dict:
        """The run as JSON: each group's fields, the model and the tensors named."""
        return {
            group: {name: _json_value(self.get(name)) for name in _names(kind)}
            for group, kind in GROUPS.items()
        }


def _same(a, b) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # tensors compare element-wise: a model's inputs given are never default
        return False


def _text(value) -> str:
    return "" if value is True else str(value)


def _json_value(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if not (isinstance(value, float) and math.isinf(value)) else "inf"
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else type(value).__name__


# -- one pass over the values ----------------------------------------------------


def _choice(what: str, value, choices) -> None:
    if value not in choices:
        raise DlperfError(f"unknown {what} {value!r}; choose from: {', '.join(choices)}")


def _whole(name: str, value, minimum: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        flag = "--" + name.replace("_", "-")
        kind = "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"
        raise DlperfError(f"{flag} must be {kind}, not {value!r}")


def _check_graph_scope(scope: str, cuda_graphs: bool) -> None:
    if not cuda_graphs:
        raise DlperfError(f"--cuda-graph-scope {scope} says what the CUDA graphs hold: "
                          "give --cuda-graphs too, or drop it")  # fmt: skip
    if scope == "full":
        return
    for part in scope.split("+"):
        if part not in CUDA_GRAPH_SCOPES:
            known = ", ".join(CUDA_GRAPH_SCOPES)
            raise DlperfError(f"unknown --cuda-graph-scope module {part!r}; give full or "
                              f"modules joined by '+' from: {known}")  # fmt: skip


def experts_graphed(cuda_graphs: bool, scope: str | None) -> bool:
    """Whether the step's CUDA graphs hold the MoE experts' kernels."""
    return cuda_graphs and (scope in (None, "full") or "moe" in scope.split("+"))


def _check_values(config: RunConfig) -> None:
    step, par, serving = config.step, config.parallel, config.serving
    get_optimizer(step.optimizer)
    _choice("attention", step.attention, ATTENTION)
    _choice("loss", step.loss, LOSSES)
    _choice("kernels", step.kernels, KERNELS)
    if par.reduce_dtype is not None:
        _choice("--reduce-dtype", par.reduce_dtype, REDUCE_DTYPES)
    if par.moe_dispatcher is not None:
        _choice("--moe-dispatcher", par.moe_dispatcher, MOE_DISPATCHERS)
    if par.sharding is not None:
        _choice("--sharding", par.sharding, SHARDINGS)
    if par.cuda_graph_scope is not None:
        _check_graph_scope(par.cuda_graph_scope, step.cuda_graphs)
    _choice("sampling", serving.sampling, SAMPLERS)
    for name in ("batch", "seq_len"):
        _whole(name, getattr(config.model, name))
    for name in ("gpus", "gpus_per_node", "dp", "tp", "pp", "cp", "ep", "micro_batch",
                 "global_batch"):  # fmt: skip
        _whole(name, getattr(par, name))
    for name in ("input_len", "output_len", "concurrency", "quant_group", "max_num_seqs",
                 "max_num_batched_tokens", "block_size", "num_prompts",
                 "max_model_len"):  # fmt: skip
        _whole(name, getattr(serving, name))
    _whole("seed", serving.seed, minimum=0)
    _whole("offload_layers", par.offload_layers, minimum=0)
    if serving.num_prompts is not None and serving.num_prompts > MAX_PROMPTS:
        raise DlperfError(
            f"--num-prompts {serving.num_prompts:,} is more than the {MAX_PROMPTS:,} requests one "
            "simulation sends (each costs simulated steps: 10^7 take over half an hour): give "
            "fewer; a few thousand settle the latency percentiles"
        )
    if serving.block_size not in BLOCK_SIZES:
        raise DlperfError(
            f"--block-size {serving.block_size} is not a KV cache block size vLLM takes: "
            f"choose from {', '.join(map(str, BLOCK_SIZES))}"
        )
    offload = serving.cpu_offload_gb
    if not isinstance(offload, (int, float)) or not 0 <= offload < math.inf:
        raise DlperfError(
            f"--cpu-offload-gb {offload} is not a number of GiB: give 0 (none) or more"
        )
    network = par.node_network_bytes_per_s
    if network is not None and not 0 < network < math.inf:
        raise DlperfError("the inter-node network bandwidth must be a positive number")
    utilization = serving.gpu_memory_utilization
    if not isinstance(utilization, (int, float)) or not 0 < utilization <= 1:
        raise DlperfError(
            f"--gpu-memory-utilization must be a fraction in (0, 1], not {utilization!r}"
        )
    if not 0 <= serving.prefix_cache_hit_rate < 1:
        raise DlperfError(
            f"--prefix-cache-hit-rate must be in [0, 1), not {serving.prefix_cache_hit_rate!r}"
        )
    _check_training_only(step)


def _check_training_only(step: StepConfig) -> None:
    """Options of a training step that an inference pass would ignore: refused."""
    if step.training:
        return
    if step.checkpoint not in (None, "none"):
        raise DlperfError(
            f"--checkpoint {step.checkpoint} recomputes activations in backward, and an "
            "inference pass (--infer) has none: drop it"
        )
    if step.loss != "eager":
        raise DlperfError(
            f"--loss {step.loss} is a training step's loss; --infer has none: drop it"
        )
    if step.kernels != "eager":
        raise DlperfError(
            f"--kernels {step.kernels} is what a training step saves for backward; --infer "
            "saves nothing: drop it"
        )
    if step.clip_grad:
        raise DlperfError(
            "--clip-grad clips a training step's gradients; --infer has none: drop it"
        )
