"""One run, resolved once: the model and its inputs, the device, the precision
policy and the way the user runs it; and a session that traces each run once.

Every verb (and the command line, and `report`, which combines three) turns
what the user gave into a `Run` with `resolve(...)`, then asks a `Session`
for the run's trace and analysis. The session keeps what it computed, so a
report that needs the analysis, the memory and the advice of one run traces
the model once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .analysis import Analysis, analyze_trace
from .errors import DlperfError
from .hardware import HardwareSpec
from .hardware import gpu as get_gpu
from .kernels.attention import ALIASES as ATTENTION_KERNEL_ALIASES
from .models import LoadedModel, load_model, parse_input
from .models.layout import channels_last
from .precision import Precision, resolve_for, with_sparsity
from .run_config import DEFAULT_GPU, KEYWORDS, DeviceConfig, RunConfig
from .tracing import Trace, repeated_blocks, trace
from .tracing.splice import splice
from .training_memory import parse_checkpoint, resize_inputs
from .training_memory.report import saved_as_run
from .training_memory.step import step_memory


@dataclass(frozen=True)
class Run:
    """A model step as the user runs it, with every name resolved."""

    model: LoadedModel
    spec: HardwareSpec
    precision: Precision
    training: bool = True
    optimizer: str = "adamw"
    attention: str = "auto"
    checkpoint: str = "none"
    compile: bool = False
    cuda_graphs: bool = False
    loss: str = "eager"  # how a language model's loss runs (`tracing.losses`)
    # the dtype data parallelism reduce-scatters sharded gradients in (FSDP's reduce_dtype)
    reduce_dtype: str = "fp32"
    sparsity: str = ""  # "2:4": linear layers pruned (`precision.with_sparsity`)
    clip_grad: bool = False  # clip_grad_norm_ before the optimizer step
    kernels: str = "eager"  # eager or te: what the layers save (`training_memory.fused`)
    # The run this one varies by a few modules (a fix of the advice): its
    # trace can be spliced rather than traced whole. Not part of its identity.
    base: Run | None = field(default=None, compare=False, repr=False)
    # What the user asked for, before names were resolved (the plan's and the
    # serving engine's options ride along in it).
    config: RunConfig = field(default=RunConfig(), compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def module(self) -> nn.Module:
        return self.model.module

    @property
    def inputs(self):
        return self.model.inputs

    @property
    def batch(self) -> int:
        first = first_tensor(self.inputs)
        return int(first.shape[0]) if first is not None and first.dim() else 1

    @property
    def token_inputs(self) -> bool:
        """Whether the inputs are token ids of shape (batch, seq)."""
        first = first_tensor(self.inputs)
        return first is not None and first.dim() == 2 and not first.is_floating_point()

    def with_inputs(self, inputs) -> Run:
        return dataclasses.replace(self, model=dataclasses.replace(self.model, inputs=inputs))

    def with_module(self, module: nn.Module, inputs=None) -> Run:
        """The same run of a changed model (a fix): its trace may be spliced
        from this run's when the inputs stay the same."""
        model = dataclasses.replace(
            self.model, module=module, inputs=self.inputs if inputs is None else inputs
        )
        return dataclasses.replace(self, model=model, base=self if inputs is None else None)

    def with_precision(self, precision: str | Precision) -> Run:
        policy = resolve_for(self.spec, precision, self.training)
        return dataclasses.replace(
            self, precision=with_sparsity(self.spec, policy, self.sparsity or None)
        )


def run_config(inputs=None, config: RunConfig | None = None, *, model=None,
               **options) -> RunConfig:  # fmt: skip
    """The config of an API call: `config` (or the second positional argument,
    `analyze(model, config)`; or, for a resolved `Run` given as the model, the
    run's own) with the keywords and inputs given laid over it."""
    if isinstance(inputs, RunConfig):
        inputs, config = None, inputs
    if config is None and isinstance(model, Run):
        config = model.config
    if config is not None and not isinstance(config, RunConfig):
        raise DlperfError(
            f"the run is a dlperf.RunConfig, not {type(config).__name__} {config!r}: give the GPU "
            "and the other options by keyword (gpu=..., precision=...)"
        )
    if inputs is not None:
        options["inputs"] = inputs
    return RunConfig.build(config, **options)


def resolve(model, inputs=None, config: RunConfig | None = None, *, verb: str | None = None,
            **options) -> Run:  # fmt: skip
    """The one place where a model name, input shapes, a GPU name and a
    precision name become values; every verb calls it (see `resolve_model`
    for the forms `model` and `inputs` take). The run is `config` with the
    keywords of `RunConfig.build` laid over it, checked for `verb`. A `Run`
    passes through as it is, or re-resolved with other step options.
    """
    if isinstance(model, Run):
        return _re_resolved(model, inputs, config, verb, options)
    config = run_config(inputs, config, **options).check(verb)
    return _resolved(model if model is not None else config.model.model, config)


def _re_resolved(run: Run, inputs, config, verb, options) -> Run:
    if inputs is None and config is None and not options:
        return run
    if inputs is not None or any(KEYWORDS[k] == "model" for k in options):
        raise DlperfError(
            "a resolved run keeps its model and inputs: resolve the model again to change them"
        )
    changed = run_config(None, config or run.config, **options).check(verb)
    return _resolved(run.model, changed, laid_out=True)


def device_spec(device: DeviceConfig) -> HardwareSpec:
    """The GPU of a run, configured by its settings (power limit, PyTorch, CUDA context)."""
    return get_gpu(
        DEFAULT_GPU if device.gpu is None else device.gpu,
        power_limit=device.power_limit,
        torch_version=device.torch_version,
        cuda_context_mib=device.cuda_context_mib,
    )


def _resolved(model, config: RunConfig, laid_out: bool = False) -> Run:
    how, step = config.model, config.step
    device = config.device
    if step.cuda_graphs and str(device.gpu).lower() in ("cpu", "local"):
        raise _no_cuda_graphs()  # before the CPU is probed for nothing
    spec = device_spec(device)
    policy = resolve_for(spec, config.precision.precision, step.training)
    policy = with_sparsity(spec, policy, config.precision.sparsity)
    attention = ATTENTION_KERNEL_ALIASES.get(step.attention, step.attention)
    checkpoint = step.checkpoint or "none"
    parse_checkpoint(checkpoint)  # a bad policy is refused before any tracing
    if step.cuda_graphs and spec.kind == "cpu":  # a CPU spec file, or a CPU's spec given
        raise _no_cuda_graphs()
    loaded = resolve_model(model, how.inputs, how.batch, how.seq_len, attention)
    if how.channels_last and not laid_out:
        loaded = _in_channels_last(loaded)
    _refuse_idle_checkpoint(loaded, checkpoint)
    return Run(
        loaded,
        spec,
        policy,
        step.training,
        step.optimizer,
        attention,
        checkpoint,
        step.compile,
        step.cuda_graphs,
        step.loss,
        config.parallel.reduce_dtype or "fp32",
        config.precision.sparsity or "",
        bool(step.clip_grad),
        kernels=step.kernels,
        config=config,
    )


# -- options that would change nothing are refused, never dropped ---------------


def _no_cuda_graphs() -> DlperfError:
    return DlperfError("--cuda-graphs replays a GPU's kernels; a CPU runs none: drop it")


def _in_channels_last(loaded: LoadedModel) -> LoadedModel:
    """A copy of the model and its inputs laid out NHWC (`--channels-last`), as
    `model.to(memory_format=torch.channels_last)` runs it; the caller's model
    and tensors are not changed."""
    def image(x) -> bool:
        if isinstance(x, torch.Tensor):
            return x.dim() == 4
        values = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
        return any(image(v) for v in values)

    if not image(loaded.inputs):
        raise DlperfError(
            "--channels-last lays out 4-D image tensors (NHWC); this model's inputs have none: "
            "drop it"
        )
    module, inputs = channels_last(loaded.module, loaded.inputs)
    return dataclasses.replace(loaded, module=module, inputs=inputs)


def _refuse_idle_checkpoint(loaded: LoadedModel, checkpoint: str) -> None:
    """`every:K` checkpoints every K-th repeated block: K past the count does nothing."""
    if not checkpoint.startswith("every:"):
        return
    k = int(checkpoint.split(":", 1)[1])
    blocks = len(repeated_blocks(loaded.module))
    if k > blocks:
        raise DlperfError(
            f"--checkpoint {checkpoint} checkpoints every {k}th block, and {loaded.name} has "
            f"{blocks}: it would checkpoint none; give every:K with K <= {blocks}"
        )


def _step_memory(recorded: Trace, run: Run) -> dict:
    """Whether a training step fits its GPU: every verb that prices the step says
    so beside its time (a step that cannot run has no speed)."""
    saved = saved_as_run(recorded, run)
    peak = step_memory(saved, run.spec, run.optimizer, run.checkpoint).peak_bytes
    gpu = run.spec.memory_bytes
    return {"peak_bytes": float(peak), "gpu_bytes": float(gpu), "fits": peak <= gpu}


# -- the model and its inputs --------------------------------------------------


def resolve_model(model, inputs=None, batch=None, seq_len=None, attention="auto") -> LoadedModel:
    """The model and inputs of every verb that takes a model, resolved one way.

    `model` is a name (see models.py), an nn.Module, or a LoadedModel already
    resolved. `inputs` is None for the model's own (a named model's defaults
    at `batch` and `seq_len`, or what a model file's factory returns, resized
    by `batch` and `seq_len` when given), shapes as text ("8x3x224x224",
    "4x128:int64", one or a list), or tensors (a tensor, tuple or dict).
    A token model (hf:) given one tensor of ids feeds it to every id input
    (input_ids, labels, decoder_input_ids); shapes without a dtype are ids.
    `attention` "eager" builds a Hugging Face model with its own attention code.
    """
    shapes = _shape_texts(inputs)
    if inputs is not None and (batch or seq_len):
        raise DlperfError(
            "--batch and --seq-len size the default inputs; with --input, give the sizes "
            "in the shape (like 8x3x224x224 or 8x512)"
        )
    loaded = _loaded(model, batch, seq_len, attention)
    tokens = loaded.family == "sequence"
    if shapes is not None:
        if tokens and len(shapes) > 1:
            raise DlperfError(f"{loaded.name} takes one --input: its token ids, like 8x512")
        inputs = [_shape(text, tokens) for text in shapes]
        inputs = inputs[0] if len(inputs) == 1 else tuple(inputs)
    elif inputs is None:
        inputs = loaded.inputs
        if loaded.family == "user" and inputs is not None and (batch or seq_len):
            if seq_len and not _has_sequence(inputs):
                raise _no_sequence(loaded)
            inputs = resize_inputs(inputs, batch=batch, seq_len=seq_len)
        elif seq_len and not tokens:
            raise _no_sequence(loaded)
    if tokens and isinstance(inputs, torch.Tensor):
        if inputs.is_floating_point():
            raise DlperfError(
                f"{loaded.name} takes token ids: give --input like 8x512 (int64), "
                f"not {str(inputs.dtype).removeprefix('torch.')}"
            )
        inputs = loaded.token_inputs(inputs)
    if inputs is None:
        raise DlperfError(
            f"no inputs for {loaded.name}: give --input SHAPE (from Python, a tensor of the "
            "input's shape; meta is fine)"
        )
    return dataclasses.replace(loaded, inputs=inputs)


def _no_sequence(loaded: LoadedModel) -> DlperfError:
    return DlperfError(
        f"--seq-len sizes a sequence, and {loaded.name}'s inputs have none it could set; "
        "drop it (or give the shape with --input)"
    )


def _has_sequence(inputs) -> bool:
    """Whether --seq-len can set a dimension: an integer (token) tensor's dim 1
    (`resize_inputs`)."""
    if isinstance(inputs, torch.Tensor):
        return inputs.dim() >= 2 and not inputs.is_floating_point()
    if isinstance(inputs, dict):
        return any(_has_sequence(v) for v in inputs.values())
    if isinstance(inputs, (list, tuple)):
        return any(_has_sequence(v) for v in inputs)
    return False


def _loaded(model, batch, seq_len, attention="auto") -> LoadedModel:
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, str):
        return load_model(model, batch=batch, seq_len=seq_len, attention=attention)
    if isinstance(model, nn.Module):
        return LoadedModel(type(model).__name__, model, None, "module")
    raise DlperfError(
        f"a model is a name like torchvision:resnet50 or an nn.Module, not {type(model).__name__}"
    )


def _shape_texts(inputs) -> list[str] | None:
    """Input shapes given as text (the command line's --input), else None."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
        return list(inputs)
    return None


def _shape(text: str, tokens: bool):
    """A meta tensor for one --input shape; a token model's default dtype is int64."""
    tensor = parse_input(text)
    if tokens and ":" not in text:
        tensor = torch.empty(tensor.shape, dtype=torch.int64, device="meta")
    return tensor


def first_tensor(inputs):
    """The first tensor of a tensor, tuple or dict of inputs (None if there is none)."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    values = inputs.values() if isinstance(inputs, dict) else inputs
    return next((t for t in values if isinstance(t, torch.Tensor)), None)


# -- the session -------------------------------------------------------------------


def _signature(inputs) -> tuple:
    """What a trace depends on in the inputs: shapes, dtypes and strides."""
    if isinstance(inputs, torch.Tensor):
        return ("t", tuple(inputs.shape), inputs.dtype, tuple(inputs.stride()))
    if isinstance(inputs, dict):
        return ("d", tuple((k, _signature(v)) for k, v in inputs.items()))
    if isinstance(inputs, (list, tuple)):
        return ("s", tuple(_signature(v) for v in inputs))
    return ("v", repr(inputs))


def _trace_options(run: Run) -> dict:
    """What a run's trace depends on beyond the module and its inputs (the
    keywords of `tracing.trace`); autocast follows the CPU's rules for the
    CPU, else CUDA's."""
    return {
        "training": run.training,
        "precision": run.precision,
        "attention": run.attention,
        "autocast_device": "cpu" if run.spec.kind == "cpu" else "cuda",
        "loss": run.loss,
    }


class Session:
    """Traces and analyses computed for runs, kept so that none is computed twice.

    A trace depends on the module, the inputs' shapes, the precision policy
    and whether the step trains; an analysis on that trace, the device and
    the optimizer. The session holds the modules it traced, so an id is never
    reused for another module while it lives.
    """

    def __init__(self):
        self._traces: dict[tuple, Trace] = {}
        self._analyses: dict[tuple, Analysis] = {}
        self._held: list = []
        # What a consumer learned while a trace ran and the trace does not hold
        # (serving's cache shapes), keyed by the consumer and id(trace): the
        # session holds its traces, so an id is never another trace's.
        self.beside_trace: dict[tuple, object] = {}

    def _trace_key(self, run: Run) -> tuple:
        return (id(run.module), _signature(run.inputs), *_trace_options(run).values())

    def trace(self, run: Run, progress: Callable[[int], None] | None = None) -> Trace:
        key = self._trace_key(run)
        if key not in self._traces:
            self._held.append(run.module)
            self._traces[key] = self._spliced(run) or trace(
                run.module, run.inputs, progress=progress, **_trace_options(run)
            )
        return self._traces[key]

    def _spliced(self, run: Run) -> Trace | None:
        """The trace of a fixed model from its base run's, when one is cached."""
        base = run.base
        options = _trace_options(run)
        if base is None or _trace_options(base) != options:
            return None
        recorded = self._traces.get(self._trace_key(base))
        if recorded is None or _signature(base.inputs) != _signature(run.inputs):
            return None

        def retrace(module, inputs):
            return trace(module, inputs, **options)

        return splice(recorded, base.module, run.module, retrace)

    def analysis(
        self,
        run: Run,
        progress: Callable[[int], None] | None = None,
        with_optimizer: bool = True,
    ) -> Analysis:
        """The run's analysis; `with_optimizer=False` leaves the optimizer step out."""
        optimizer = run.optimizer if run.training and with_optimizer else ""
        how = (run.checkpoint, run.compile, run.cuda_graphs, run.clip_grad)
        key = (*self._trace_key(run), id(run.spec), optimizer, how)
        if key not in self._analyses:
            self._held.append(run.spec)
            recorded = self.trace(run, progress)
            analysis = analyze_trace(
                recorded,
                run.spec,
                model_name=run.name,
                optimizer=optimizer,
                checkpoint=run.checkpoint,
                compiled=run.compile,
                cuda_graphs=run.cuda_graphs,
                clip_grad=run.clip_grad,
            )
            if run.training and optimizer:
                analysis.memory = _step_memory(recorded, run)
            self._analyses[key] = analysis
        return self._analyses[key]
