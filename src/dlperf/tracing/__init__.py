"""Run a model on fake tensors and record one event per aten call.

Nothing is allocated and the user's model is never changed (`inputs`). A
dispatch mode below autograd records each aten call with its shapes, dtypes
and strides (`recorder`); module forward hooks keep the stack of running
modules (`hooks`), and the autograd nodes each module call creates are
labelled with its path, so a backward op is attributed through the node that
runs it, residual branches included (`labels`). Forward, the loss, and (when
training) backward run; the optimizer step is costed from the parameters.
Ops that move no data are counted, not recorded (`views`); repeated blocks
are found from the module tree (`blocks`); the values live in `events`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call

from ..errors import DlperfError
from ..hardware import probe
from ..precision import Precision
from ..precision import precision as get_precision
from .attention import FUSED_REQUESTS, fused_attention
from .autocast import CudaAutocastFloat32
from .blocks import repeated_blocks
from .events import LOSS_MODULE, PHASES, OpEvent, SavedTensor, TensorMeta, Trace, within
from .failures import quiet_torch_logs, raise_explained
from .hooks import ModuleHooks
from .inputs import FakeCall, fake_call
from .inputs import _loss_of as _loss_of  # measurement/ runs the same loss for real
from .losses import LOSSES, traced_loss
from .recorder import Recorder
from .recorder import _storage_key as _storage_key
from .views import VIEWS, is_free

__all__ = [
    "LOSS_MODULE",
    "PHASES",
    "VIEWS",
    "OpEvent",
    "SavedTensor",
    "TensorMeta",
    "Trace",
    "is_free",
    "repeated_blocks",
    "trace",
    "within",
]


def trace(
    model: nn.Module,
    inputs,
    training: bool = True,
    precision: str | Precision = "fp32",
    progress: Callable[[int], None] | None = None,
    attention: str = "auto",
    autocast_device: str = "cuda",
    loss: str = "eager",
) -> Trace:
    """Run `model(inputs)` (and backward when training) on fake tensors.

    `attention` says how `scaled_dot_product_attention` runs: auto, flash,
    efficient or cudnn as one fused kernel (`dlperf.attention` events, the
    backend chosen when priced), math as its decomposition in the inputs'
    dtype, eager as the model's own code calls it (`tracing.attention`).
    `autocast_device` is whose autocast lists a mixed-precision policy follows:
    "cuda" (the GPU's: softmax, norms, exp ... in float32, `tracing.autocast`)
    or "cpu" (the fake tensors' own, for predictions of this machine).
    `loss` is how a language model's loss runs: eager (the model's code),
    fused or chunked (`tracing.losses`)."""
    policy = get_precision(precision)
    if not isinstance(model, nn.Module):
        raise DlperfError(f"expected an nn.Module, got {type(model).__name__}")
    if attention not in (*FUSED_REQUESTS, "math", "eager"):
        choices = ", ".join((*FUSED_REQUESTS, "math", "eager"))
        raise DlperfError(f"unknown attention {attention!r}; choose from: {choices}")
    module_types = {name: type(mod).__name__ for name, mod in model.named_modules()}
    call = fake_call(model, inputs, policy, training)
    inputs_grad = any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (*call.args, *call.kwargs.values())
    )
    if training and not call.trainable_params and not inputs_grad:
        raise DlperfError(
            f"{type(model).__name__} has no trainable parameters: a training step would have "
            "nothing to learn (and no gradient to take); use --infer, or unfreeze some"
        )
    recorder = Recorder(progress, module_types)
    recorder.know_params(call.state)
    hooks = ModuleHooks(model, recorder, training)
    if loss not in LOSSES:
        raise DlperfError(f"unknown loss {loss!r}; choose from: {', '.join(LOSSES)}")
    _run(model, call, hooks, policy, training, attention, autocast_device, loss)
    return Trace(
        events=recorder.events,
        precision=policy,
        training=training,
        params=call.params,
        trainable_params=call.trainable_params,
        param_shapes=call.param_shapes,
        trainable_shapes=call.trainable_shapes,
        module_types=module_types,
        inputs=call.input_meta(),
        suppressed=recorder.suppressed,
        free_ops=recorder.free_ops,
        saved=list(recorder.saved.values()),
        module_inputs=hooks.module_inputs,
        blocks=repeated_blocks(model),
        module_calls=hooks.module_calls,
    )


def _run(
    model: nn.Module,
    call: FakeCall,
    hooks: ModuleHooks,
    policy: Precision,
    training: bool,
    attention: str = "auto",
    autocast_device: str = "cuda",
    loss_kind: str = "eager",
) -> None:
    """Forward, the loss and (when training) backward, under the recorder.

    The model's train/eval mode is restored after; a failure is raised as the
    user's model error or as dlperf's own bug (`failures`)."""
    recorder = hooks.recorder
    was_training = model.training
    autocast = contextlib.ExitStack()
    if policy.autocast_dtype:
        autocast.enter_context(torch.autocast("cpu", dtype=policy.autocast_dtype))
        if autocast_device == "cuda":
            autocast.enter_context(CudaAutocastFloat32())
    sdpa = (
        contextlib.nullcontext()
        if attention == "eager"
        else fused_attention(attention, policy.autocast_dtype)
    )
    try:
        model.train(training)
        with hooks.installed(), call.mode, recorder, quiet_torch_logs():
            saving = torch.autograd.graph.saved_tensors_hooks(recorder.pack, lambda t: t)
            with autocast, torch.set_grad_enabled(training), saving, sdpa:
                if training and loss_kind != "eager":
                    loss = traced_loss(model, call, loss_kind)
                else:
                    out = functional_call(model, call.state, call.args, call.kwargs)
                    loss = _loss_of(out) if training else None
            if training:
                recorder.phase = "backward"
                loss.backward()
                recorder.record_rnn_backward()
        if recorder.failure:
            raise recorder.failure
    except DlperfError:
        raise
    except Exception as err:
        # a recording failure explains what followed
        raise_explained(recorder.failure or err, lambda: _where(model, recorder))
    finally:
        model.train(was_training)


def _where(model: nn.Module, recorder: Recorder) -> str:
    """The module running when the model failed, with its type, for the error."""
    path = recorder.module_path()
    if path and path in recorder.module_types:
        return f"{path} ({recorder.module_types[path]})"
    return path or type(model).__name__


def _recorded_training_ops(model: nn.Module, x: torch.Tensor) -> int:
    recorded = trace(model, x, training=True, precision=get_precision("fp32"))
    return sum(1 for e in recorded.events if not e.op.startswith("aten.detach"))


probe.use_tracer(probe.StepTracer(_recorded_training_ops, _loss_of))
