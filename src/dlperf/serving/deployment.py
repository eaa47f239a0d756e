"""A deployment: a decoder on its GPUs, run by an engine with its settings.

`deploy(...)` checks the options and builds what `serve` (a static batch)
and `simulate` (requests arriving at a rate) both price with: the resolved
model, the engine (precision, KV cache dtype, tensor parallelism, kernels,
sampler), the step tracer over a shared session, and the engine's memory
plan (`serving.memory`): weights, the activations of one step of
`max_num_batched_tokens` tokens and the workspace, inside
`gpu_memory_utilization` of each GPU, the KV cache in the rest, in blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import bytes_per_element
from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..precision import AUTO
from ..run import Run, Session, device_spec, resolve
from ..run_config import RunConfig
from ..tracing import repeated_blocks
from .cache import check_decoder, context_window
from .memory import (
    ServingMemory,
    activation_bytes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    kv_bytes_per_token,
    workspace_bytes,
)
from .quant import Scheme, check_group, kv_dtype_for, scheme_for, weight_bytes
from .steps import Engine, Step, StepTracer
from .timeline import Timeline

GIB = 2**30


@dataclass
class Deployment:
    run: Run
    engine: Engine
    tracer: StepTracer
    pp: int
    cuda_graphs: bool
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    block_size: int
    # tokens a request may hold, as given (vLLM's --max-model-len); else the
    # model's positions bound it (`cache.step_inputs` says so)
    max_model_len: int | None = None

    @property
    def context_tokens(self) -> int | None:
        """The most tokens one sequence holds: max_model_len, else the model's positions."""
        return self.max_model_len or context_window(self.run.model)

    def check_request(self, tokens: int) -> None:
        """A request of `tokens` (prompt + output) is refused past max_model_len, as vLLM does."""
        if self.max_model_len and tokens > self.max_model_len:
            raise DlperfError(
                f"a request of {tokens} tokens (prompt + output) is longer than the engine's "
                f"max_model_len {self.max_model_len}: shorten it, or give --max-model-len {tokens}"
            )

    @property
    def spec(self) -> HardwareSpec:
        return self.engine.spec

    @property
    def scheme(self) -> Scheme:
        return self.engine.scheme

    @property
    def tp(self) -> int:
        return self.engine.tp

    @property
    def budget_bytes(self) -> float:
        """What the engine may use of each GPU."""
        return self.gpu_memory_utilization * self.spec.memory_bytes

    def timeline(self, input_len: int, output_len: int) -> Timeline:
        return Timeline(self.tracer, input_len, output_len, self.pp, self.cuda_graphs)

    def memory(self, prefill: Step) -> tuple[ServingMemory, float]:
        """(memory per GPU without KV caches, cache bytes per token of a
        sequence on one GPU), the activations scaled from `prefill` to one
        step of `max_num_batched_tokens` tokens."""
        blocks = repeated_blocks(self.run.module)
        weights = weight_bytes(self.run.module, blocks, self.scheme) / (self.tp * self.pp)
        offloaded = self.engine.cpu_offload_bytes
        if offloaded > weights:
            raise DlperfError(
                f"--cpu-offload-gb {offloaded / GIB:g} is more than the {weights / GIB:.2f} GiB "
                f"of weights each GPU holds: give at most that"
            )
        weights -= offloaded
        traced = activation_bytes(prefill.activation_bytes, prefill.residual_bytes)
        chunk = self.max_num_batched_tokens
        activations = traced * chunk / (prefill.batch * prefill.new_tokens)
        fixed = ServingMemory(weights, 0.0, activations, workspace_bytes(self.spec))
        return fixed, self.kv_bytes_per_token(prefill, per_gpu=True)

    def kv_bytes_per_token(self, step: Step, per_gpu: bool) -> float:
        kv_bytes = bytes_per_element(self.engine.kv_dtype)
        if not per_gpu:
            return kv_bytes_per_token(step.kv_shapes, kv_bytes)
        return kv_bytes_per_token(step.kv_shapes, kv_bytes, self.tp, self.pp)


def deploy(model, config: RunConfig, session: Session | None = None, fused: bool = True,
           custom_all_reduce: bool = False) -> Deployment:  # fmt: skip
    """The deployment `serve` and `simulate` price (see `serve` for the options);
    `custom_all_reduce` runs tensor parallelism's all-reduces as vLLM's own
    kernel does on NVLink (`collectives.custom_all_reduce_s`)."""
    serving, par = config.serving, config.parallel
    tp, pp = par.tp or 1, par.pp or 1
    if model is None:
        model = config.model.model
    if isinstance(model, Run):  # its model and GPU; serving sets the rest
        model, spec = model.model, model.spec
    else:
        spec = device_spec(config.device)
    _check_step_tokens(serving, spec)
    precision = config.precision.precision
    scheme = scheme_for("fp16" if precision == AUTO else precision, spec, serving.quant_group)
    kv_dtype = kv_dtype_for(serving.kv_cache_dtype, scheme)
    step = RunConfig.build(gpu=spec, precision=scheme.base, training=False, batch=1,
                           attention=config.step.attention)  # fmt: skip
    run = resolve(model, config=step)
    check_decoder(run.model)
    heads = getattr(getattr(run.module, "config", None), "num_attention_heads", None)
    if isinstance(heads, int) and heads % tp:
        splits = ", ".join(str(t) for t in range(2, min(heads, 64) + 1) if heads % t == 0)
        raise DlperfError(
            f"--tp {tp} does not divide {run.name}'s {heads} attention heads; engines split "
            f"heads evenly: use --tp {splits[:40]}"
        )
    blocks = repeated_blocks(run.module)
    check_group(run.module, blocks, scheme)
    if pp > max(1, len(blocks)):
        raise DlperfError(f"--pp {pp} is more stages than the model's {len(blocks)} layers")
    offload = serving.cpu_offload_gb * GIB
    if offload and not spec.pcie_bandwidth_bytes_per_s:
        raise DlperfError(
            f"--cpu-offload-gb needs the host link's bandwidth, which {spec.name}'s spec does "
            "not give: add pcie_bandwidth_bytes_per_s to a spec file, or drop the option"
        )
    engine = Engine(spec, scheme, kv_dtype, tp, fused, par.gpus_per_node,
                    par.node_network_bytes_per_s, serving.sampling, custom_all_reduce,
                    offload)  # fmt: skip
    tracer = StepTracer(run, engine, session or Session())
    chunk = serving.max_num_batched_tokens or default_max_num_batched_tokens(spec)
    return Deployment(run, engine, tracer, pp, config.step.cuda_graphs, chunk,
                      serving.gpu_memory_utilization, serving.block_size,
                      _max_model_len(run, serving.max_model_len))  # fmt: skip


def _check_step_tokens(serving, spec: HardwareSpec) -> None:
    """vLLM refuses a step of fewer tokens than the sequences it may hold."""
    tokens = serving.max_num_batched_tokens
    seqs = serving.max_num_seqs or default_max_num_seqs(spec)
    if tokens is not None and tokens < seqs:
        which = "--max-num-seqs"
        if not serving.max_num_seqs:
            which += f", vLLM's default on {spec.id}"
        raise DlperfError(
            f"--max-num-batched-tokens {tokens} is fewer than the {seqs} sequences a step "
            f"may hold ({which}), which vLLM refuses: give at least {seqs}"
        )


def _max_model_len(run: Run, given: int | None) -> int | None:
    """--max-model-len as given, refused past the model's positions."""
    window = context_window(run.model)
    if given and window and given > window:
        raise DlperfError(
            f"--max-model-len {given} is more than the {window} positions of {run.name}: "
            f"give the model more with {run.model.with_positions(given)}, or a smaller "
            "--max-model-len"
        )
    return given
