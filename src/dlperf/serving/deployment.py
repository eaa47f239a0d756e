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
from ..hardware import gpu as get_gpu
from ..run import Run, Session, resolve
from ..tracing import repeated_blocks
from .cache import check_decoder
from .memory import (
    BLOCK_SIZE,
    GPU_MEMORY_UTILIZATION,
    ServingMemory,
    activation_bytes,
    default_max_num_batched_tokens,
    kv_bytes_per_token,
    workspace_bytes,
)
from .quant import Scheme, kv_dtype_for, scheme_for, weight_bytes
from .steps import SAMPLERS, Engine, Step, StepTracer
from .timeline import Timeline


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
        traced = activation_bytes(prefill.activation_bytes, _residual_bytes(prefill))
        chunk = self.max_num_batched_tokens
        activations = traced * chunk / (prefill.batch * prefill.new_tokens)
        fixed = ServingMemory(weights, 0.0, activations, workspace_bytes(self.spec))
        return fixed, self.kv_bytes_per_token(prefill, per_gpu=True)

    def kv_bytes_per_token(self, step: Step, per_gpu: bool) -> float:
        kv_bytes = bytes_per_element(self.engine.kv_dtype)
        if not per_gpu:
            return kv_bytes_per_token(step.kv_shapes, kv_bytes)
        return kv_bytes_per_token(step.kv_shapes, kv_bytes, self.tp, self.pp)


def _residual_bytes(step: Step) -> float:
    """The residual stream a step holds around its largest op (b x tokens x hidden)."""
    for r in step.rows:
        if r.op.startswith("aten.embedding") and r.shapes:
            return float(step.batch * step.new_tokens * r.shapes[0][-1] * 2)
    return 0.0


def deploy(
    model,
    gpu: str | HardwareSpec = "a100-sxm4-80gb",
    precision: str = "fp16",
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: str | None = None,
    cuda_graphs: bool = False,
    gpus_per_node: int = 8,
    node_network_bytes_per_s: float | None = None,
    fused: bool = True,
    session: Session | None = None,
    attention: str = "auto",
    quant_group: int | None = None,
    sampling: str = "greedy",
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    block_size: int = BLOCK_SIZE,
) -> Deployment:
    """The deployment `serve` and `simulate` price (see `serve` for the options)."""
    _check_counts(tp, pp, gpus_per_node)
    _check_engine(max_num_batched_tokens, gpu_memory_utilization, block_size)
    if isinstance(model, Run):  # its model and GPU; serving sets the rest
        model, gpu = model.model, model.spec
    spec = get_gpu(gpu)
    scheme = scheme_for(precision, spec, quant_group)
    kv_dtype = kv_dtype_for(kv_cache_dtype, scheme)
    run = resolve(
        model, gpu=spec, precision=scheme.base, training=False, batch=1,
        attention=attention,
    )  # fmt: skip
    check_decoder(run.model)
    heads = getattr(getattr(run.module, "config", None), "num_attention_heads", None)
    if isinstance(heads, int) and heads % tp:
        splits = ", ".join(str(t) for t in range(2, min(heads, 64) + 1) if heads % t == 0)
        raise DlperfError(
            f"--tp {tp} does not divide {run.name}'s {heads} attention heads; engines split "
            f"heads evenly: use --tp {splits[:40]}"
        )
    blocks = repeated_blocks(run.module)
    if pp > max(1, len(blocks)):
        raise DlperfError(f"--pp {pp} is more stages than the model's {len(blocks)} layers")
    if sampling not in SAMPLERS:
        raise DlperfError(f"unknown sampling {sampling!r}; choose from: {', '.join(SAMPLERS)}")
    engine = Engine(
        spec, scheme, kv_dtype, tp, fused, gpus_per_node, node_network_bytes_per_s, sampling
    )
    tracer = StepTracer(run, engine, session or Session())
    chunk = max_num_batched_tokens or default_max_num_batched_tokens(spec)
    return Deployment(run, engine, tracer, pp, cuda_graphs, chunk, gpu_memory_utilization,
                      block_size)  # fmt: skip


def _check_counts(tp: int, pp: int, gpus_per_node: int) -> None:
    for name, value in (("--tp", tp), ("--pp", pp), ("--gpus-per-node", gpus_per_node)):
        if not isinstance(value, int) or value <= 0:
            raise DlperfError(f"{name} must be a positive whole number, not {value!r}")


def _check_engine(max_num_batched_tokens, gpu_memory_utilization, block_size) -> None:
    for name, value in (("--max-num-batched-tokens", max_num_batched_tokens),
                        ("--block-size", block_size)):  # fmt: skip
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise DlperfError(f"{name} must be a positive whole number, not {value!r}")
    if not isinstance(gpu_memory_utilization, (int, float)) or not 0 < gpu_memory_utilization <= 1:
        raise DlperfError(
            f"--gpu-memory-utilization must be a fraction in (0, 1], not {gpu_memory_utilization!r}"
        )
