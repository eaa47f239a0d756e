"""Run a model on fake tensors and record one event per aten call.

Nothing is allocated and the user's model is never changed: its parameters
are swapped, for the duration of one `functional_call`, for fake tensors of
the same shapes (in the precision policy's dtype), so a model built on the
meta device and a model with real weights trace alike. A dispatch mode below
autograd records each aten call with its shapes, dtypes and strides. Module
forward hooks keep the stack of running modules; as each module returns,
the autograd nodes it created are labelled with its path, so a backward op
is attributed through the node that runs it (residual branches included).
Forward, the loss, and (when training) backward run; the optimizer step is
costed from the parameters.

Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) are recorded at the module level,
one event per layer call and phase, whatever fused op the backend runs
(mkldnn on the CPU, cuDNN on a GPU): seed 004's Table 1 maps them to GEMMs.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

from .errors import DlperfError, InternalError, first_line, raised_by_dlperf
from .precision import Precision
from .precision import precision as get_precision

PHASES = ("forward", "backward", "optimizer")
LOSS_MODULE = "(loss)"
# Calls that describe tensors without touching device memory: not recorded.
_SKIP_PREFIXES = ("prim.",)
_SKIP_OPS = {"aten.detach.default", "aten.lift_fresh.default"}


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(int(s) for s in t.shape), t.dtype, tuple(int(s) for s in t.stride()))

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def channels_last(self) -> bool:
        """4-D tensor laid out NHWC (channels innermost) rather than NCHW."""
        if len(self.shape) != 4 or self.shape[1] == 1:
            return False
        return self.stride[1] == 1 and self.stride[3] != 1

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point


def within(path: str, root: str) -> bool:
    """Whether module `path` is `root` or lies inside it ("a.b" is within "a")."""
    return path == root or path.startswith(root + ".")


_ITEMSIZE: dict[torch.dtype, int] = {}


def _itemsize(dtype: torch.dtype) -> int:
    if dtype not in _ITEMSIZE:
        _ITEMSIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return _ITEMSIZE[dtype]


@dataclass
class OpEvent:
    """One aten call (or one recurrent layer call) as recorded."""

    op: str  # overload, e.g. "aten.mm.default"
    args: tuple
    kwargs: dict
    outputs: tuple[TensorMeta, ...]
    module: str
    phase: str
    module_type: str = ""
    info: dict = field(default_factory=dict)  # module-level events carry their config

    @property
    def packet(self) -> str:
        """The overload packet, e.g. "aten.mm" for "aten.mm.default"."""
        if not self.op.startswith(("aten.", "prims.")):
            return self.op  # dlperf's own module-level events have no overloads
        return self.op.rsplit(".", 1)[0] if self.op.count(".") >= 2 else self.op

    def tensors(self) -> list[TensorMeta]:
        found = []
        for a in (*self.args, *self.kwargs.values()):
            if isinstance(a, TensorMeta):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                found += [x for x in a if isinstance(x, TensorMeta)]
        return found


@dataclass(frozen=True)
class SavedTensor:
    """A tensor autograd keeps for backward (one entry per distinct storage)."""

    module: str
    nbytes: int
    kind: str  # "activation", or "weight copy" (a parameter cast by autocast)


@dataclass
class Trace:
    events: list[OpEvent]
    precision: Precision
    training: bool
    params: int
    trainable_params: int
    param_shapes: list[tuple[int, ...]]
    module_types: dict[str, str]
    inputs: list[TensorMeta]
    suppressed: Counter = field(default_factory=Counter)
    free_ops: int = 0
    saved: list[SavedTensor] = field(default_factory=list)
    module_inputs: dict[str, int] = field(default_factory=dict)  # bytes of each module's input
    blocks: list[str] = field(default_factory=list)  # repeated blocks, in order

    @property
    def activation_bytes(self) -> int:
        return sum(t.nbytes for t in self.saved if t.kind == "activation")


def _meta(x):
    if isinstance(x, torch.Tensor):
        return TensorMeta.of(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(v) for v in x) if not hasattr(x, "_fields") else tuple(map(_meta, x))
    if isinstance(x, (int, float, bool, str)) or x is None:
        return x
    if isinstance(x, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return x
    return repr(x)


def _flat_outputs(out) -> tuple[TensorMeta, ...]:
    if isinstance(out, torch.Tensor):
        return (TensorMeta.of(out),)
    if isinstance(out, (list, tuple)):
        return tuple(TensorMeta.of(t) for t in out if isinstance(t, torch.Tensor))
    return ()


class _Recorder(TorchDispatchMode):
    def __init__(self, progress):
        super().__init__()
        self.phase = "forward"
        self.stack: list[str] = []  # paths of the modules running forward
        self.events: list[OpEvent] = []
        self.suppressed: Counter = Counter()
        self.rnn_paths: set[str] = set()
        self.rnn_depth = 0
        self.progress = progress
        self.module_types: dict[str, str] = {}
        self.free_ops = 0
        self.param_ids: set[int] = set()
        self.param_storages: set = set()
        self.weight_copies: set = set()
        self.masks: dict = {}  # storage key -> elements, for dropout masks
        self.saved: dict = {}  # storage key -> SavedTensor
        self.failure: Exception | None = None  # the first error while recording

    def pack(self, t: torch.Tensor):
        """saved_tensors_hooks pack: note each distinct storage autograd keeps."""
        key = _storage_key(t)
        if key not in self.saved and key not in self.param_storages:
            kind = "weight copy" if key in self.weight_copies else "activation"
            path = self.stack[-1] if self.stack else LOSS_MODULE
            nbytes = self.masks.get(key, t.untyped_storage().nbytes())
            self.saved[key] = SavedTensor(path, nbytes, kind)
        return t

    def module_path(self) -> str:
        if self.phase == "forward":
            return self.stack[-1] if self.stack else LOSS_MODULE
        node = torch._C._current_autograd_node()
        if node is None:
            return ""
        return node.metadata.get(_LABEL, LOSS_MODULE)

    def in_rnn(self, path: str) -> bool:
        if self.rnn_depth:
            return True
        return any(within(path, p) for p in self.rnn_paths)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)  # the model's own errors propagate from here
        try:
            self.record(func, args, kwargs, out)
        except Exception as err:
            # torch calls some ops from C++ that cannot pass an exception on (the
            # process aborts): keep the first failure and raise it after the run
            self.failure = self.failure or err
        return out

    def record(self, func, args, kwargs, out) -> None:
        """Note one aten call as an OpEvent (or count it, if it moves no data)."""
        name = _NAMES.get(func)
        if name is None:
            name = _NAMES[func] = str(func)
        if name in _FREE:
            self.free_ops += 1
            return
        if name == "aten._to_copy.default" and args and id(args[0]) in self.param_ids:
            self.weight_copies.add(_storage_key(out))
        elif name == "aten.native_dropout.default" and isinstance(out, tuple):
            # CUDA keeps dropout masks as bool (1 byte); the CPU kernels use the data dtype
            self.masks[_storage_key(out[1])] = out[1].numel()
        elif name.startswith("aten.bernoulli") and isinstance(out, torch.Tensor):
            self.masks[_storage_key(out)] = out.numel()
        path = self.module_path()
        if self.in_rnn(path):
            self.suppressed[name] += 1
            return
        self.events.append(
            OpEvent(
                op=name,
                args=tuple(_meta(a) for a in args),
                kwargs={k: _meta(v) for k, v in kwargs.items()},
                outputs=_flat_outputs(out),
                module=path,
                phase=self.phase,
                module_type=self.module_types.get(path, ""),
            )
        )
        if self.progress and len(self.events) % 500 == 0:
            self.progress(len(self.events))


_NAMES: dict = {}


def _storage_key(t: torch.Tensor):
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


def _free_ops() -> set[str]:
    """Overloads that move no data (views, metadata, allocation): not recorded."""
    from .ops.movement import VIEWS

    free = set(_SKIP_OPS)
    for packet in VIEWS:
        op = getattr(torch.ops.aten, packet, None)
        if op is None:
            continue
        free.update(f"aten.{packet}.{overload}" for overload in op.overloads())
    return free


class _FreeOps:
    """Lazily built set (the op registry imports this module)."""

    def __init__(self):
        self.names: set[str] | None = None

    def __contains__(self, name: str) -> bool:
        if self.names is None:
            self.names = _free_ops()
        return name in self.names or name.startswith(_SKIP_PREFIXES)


_FREE = _FreeOps()


_LABEL = "dlperf_module"
_CALL = "dlperf_call"


def _grad_fns(x, found: set) -> set:
    """The autograd nodes that produced the tensors in `x` (nested containers too)."""
    if isinstance(x, torch.Tensor):
        if x.grad_fn is not None:
            found.add(x.grad_fn)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _grad_fns(v, found)
    elif isinstance(x, dict):
        for v in x.values():
            _grad_fns(v, found)
    elif hasattr(x, "to_tuple"):  # Hugging Face ModelOutput
        _grad_fns(x.to_tuple(), found)
    return found


def _label_nodes(output, path: str, call: int, calls: list[set]) -> None:
    """Label the autograd nodes one module call created: those between its
    outputs and the nodes behind its inputs (`calls[call]`). Regions already
    labelled by inner calls are jumped over, from their outputs to their inputs."""
    boundary = calls[call]
    stack = list(_grad_fns(output, set()))
    seen = set()
    while stack:
        node = stack.pop()
        if node in seen or node in boundary:
            continue
        seen.add(node)
        inner = node.metadata.get(_CALL)
        if inner is not None:
            if inner != call:
                stack.extend(calls[inner])
            continue
        node.metadata[_LABEL] = path
        node.metadata[_CALL] = call
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)


def _rnn_event(module: nn.RNNBase, path: str, x: torch.Tensor, phase: str) -> OpEvent:
    if isinstance(x, nn.utils.rnn.PackedSequence):
        raise DlperfError(
            f"{path}: packed sequences are not supported; "
            "pass a padded (seq, batch, feature) tensor"
        )
    if x.dim() == 2:  # unbatched (seq, feature)
        seq, batch = x.shape[0], 1
    elif module.batch_first:
        batch, seq = x.shape[0], x.shape[1]
    else:
        seq, batch = x.shape[0], x.shape[1]
    mode = module.mode  # "LSTM", "GRU", "RNN_TANH", "RNN_RELU"
    info = {
        "mode": mode,
        "input_size": module.input_size,
        "hidden_size": module.hidden_size,
        "proj_size": getattr(module, "proj_size", 0),
        "num_layers": module.num_layers,
        "bidirectional": module.bidirectional,
        "bias": module.bias,
        "batch": int(batch),
        "seq": int(seq),
        "input_requires_grad": bool(x.requires_grad),
    }
    meta = TensorMeta.of(x)
    return OpEvent(
        op=f"dlperf.rnn.{mode.lower()}",
        args=(meta,),
        kwargs={},
        outputs=(),
        module=path,
        phase=phase,
        module_type=type(module).__name__,
        info=info,
    )


def _to_fake(t: torch.Tensor, dtype: torch.dtype | None, requires_grad: bool) -> torch.Tensor:
    """A fake CPU tensor like `t` (same shape, strides), in `dtype` if given."""
    fake = torch.empty_strided(
        tuple(t.shape), tuple(t.stride()), dtype=dtype or t.dtype, device="cpu"
    )
    if requires_grad and fake.is_floating_point():
        fake.requires_grad_(True)
    return fake


def _fake_inputs(inputs, policy: Precision):
    """Positional args and keyword args of the model call, as fake tensors."""
    half = policy.param_dtype if policy.param_dtype != torch.float32 else None

    def convert(x):
        if isinstance(x, torch.Tensor):
            return _to_fake(x, half if x.is_floating_point() else None, False)
        if isinstance(x, (list, tuple)):
            return type(x)(convert(v) for v in x)
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        return x

    if isinstance(inputs, dict):
        return (), convert(inputs)
    if isinstance(inputs, torch.Tensor):
        return (convert(inputs),), {}
    if isinstance(inputs, (list, tuple)):
        return tuple(convert(v) for v in inputs), {}
    raise DlperfError(f"inputs must be a tensor, a tuple of tensors or a dict, not {type(inputs)}")


def _loss_of(out) -> torch.Tensor:
    """A scalar to differentiate: the model's own loss if it returns one, a
    cross-entropy on class logits, else the sum of its floating outputs."""
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, dict) and isinstance(out.get("loss"), torch.Tensor):
        return out["loss"]
    if isinstance(out, torch.Tensor) and out.dim() == 2 and out.is_floating_point():
        target = torch.zeros(out.shape[0], dtype=torch.long)
        return nn.functional.cross_entropy(out.float(), target)
    tensors = []

    def collect(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.requires_grad:
                tensors.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)
        elif isinstance(x, dict) or hasattr(x, "values"):
            for v in x.values():
                collect(v)

    collect(out)
    if not tensors:
        raise DlperfError(
            "the model's output needs no gradient (no trainable parameters reach it); use --infer"
        )
    total = tensors[0].float().sum()
    for t in tensors[1:]:
        total = total + t.float().sum()
    return total


def trace(
    model: nn.Module,
    inputs,
    training: bool = True,
    precision: str | Precision = "fp32",
    progress: Callable[[int], None] | None = None,
) -> Trace:
    """Run `model(inputs)` (and backward when training) on fake tensors."""
    policy = get_precision(precision)
    if not isinstance(model, nn.Module):
        raise DlperfError(f"expected an nn.Module, got {type(model).__name__}")
    module_types = {name: type(mod).__name__ for name, mod in model.named_modules()}
    paths = {id(mod): name for name, mod in model.named_modules()}
    fake_mode = FakeTensorMode()
    with fake_mode:
        params = {}
        shapes, total, trainable = [], 0, 0
        for name, p in model.named_parameters():
            dtype = policy.param_dtype if p.is_floating_point() else p.dtype
            params[name] = _to_fake(p, dtype, training and p.requires_grad)
            shapes.append(tuple(p.shape))
            total += p.numel()
            trainable += p.numel() if p.requires_grad else 0
        for name, b in model.named_buffers():
            dtype = policy.param_dtype if b.is_floating_point() else b.dtype
            params[name] = _to_fake(b, dtype, False)
        args, kwargs = _fake_inputs(inputs, policy)
    input_meta = [
        TensorMeta.of(t) for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)
    ]

    recorder = _Recorder(progress)
    recorder.module_types = module_types
    recorder.param_ids = {id(t) for t in params.values()}
    recorder.param_storages = {_storage_key(t) for t in params.values()}
    module_inputs: dict[str, int] = {}
    rnn_calls: list[tuple[nn.RNNBase, str, torch.Tensor]] = []
    calls: list[set] = []  # per module call: the autograd nodes behind its inputs
    open_calls: list[int] = []  # the calls still running, innermost last

    def pre_hook(module, hook_args):
        path = paths.get(id(module))
        if path is None:
            return
        recorder.stack.append(path)
        if path not in module_inputs:
            first = hook_args[0] if hook_args else None
            module_inputs[path] = first.nbytes if isinstance(first, torch.Tensor) else 0
        if training:
            open_calls.append(len(calls))
            calls.append(_grad_fns(hook_args, set()))
        if isinstance(module, nn.RNNBase):
            if not recorder.rnn_depth:
                x = hook_args[0]
                recorder.events.append(_rnn_event(module, path, x, "forward"))
                rnn_calls.append((module, path, x))
                recorder.rnn_paths.add(path)
            recorder.rnn_depth += 1

    def post_hook(module, hook_args, output):
        path = paths.get(id(module))
        if path is None:
            return
        if recorder.stack and recorder.stack[-1] == path:
            recorder.stack.pop()
        if training and open_calls:
            _label_nodes(output, path, open_calls.pop(), calls)
        if isinstance(module, nn.RNNBase):
            recorder.rnn_depth -= 1

    handles = [
        nn.modules.module.register_module_forward_pre_hook(pre_hook),
        nn.modules.module.register_module_forward_hook(post_hook),
    ]
    was_training = model.training
    autocast = (
        torch.autocast("cpu", dtype=policy.autocast_dtype)
        if policy.autocast_dtype
        else contextlib.nullcontext()
    )
    try:
        model.train(training)
        with fake_mode, recorder, _quiet_torch_logs():
            saving = torch.autograd.graph.saved_tensors_hooks(recorder.pack, lambda t: t)
            with autocast, torch.set_grad_enabled(training), saving:
                out = functional_call(model, params, args, kwargs)
                loss = _loss_of(out) if training else None
            if training:
                recorder.phase = "backward"
                loss.backward()
                for module, path, x in rnn_calls:
                    recorder.events.append(_rnn_event(module, path, x, "backward"))
        if recorder.failure:
            raise recorder.failure
    except DlperfError:
        raise
    except Exception as err:
        err = recorder.failure or err  # a recording failure explains what followed
        if raised_by_dlperf(err):
            raise InternalError.of(err) from err
        path = recorder.module_path()
        if path and path in module_types:
            where = f"{path} ({module_types[path]})"
        else:
            where = path or type(model).__name__
        raise _model_error(err, where) from None
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return Trace(
        events=recorder.events,
        precision=policy,
        training=training,
        params=total,
        trainable_params=trainable,
        param_shapes=shapes,
        module_types=module_types,
        inputs=input_meta,
        suppressed=recorder.suppressed,
        free_ops=recorder.free_ops,
        saved=list(recorder.saved.values()),
        module_inputs=module_inputs,
        blocks=repeated_blocks(model),
    )


# Loggers that print a traceback of their own before re-raising an error that
# the user's model caused: dlperf reports that error in one line instead.
_NOISY_LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def _quiet_torch_logs():
    """Drop the records of `_NOISY_LOGGERS` while tracing (restored after)."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    before = [log.disabled for log in loggers]
    for log in loggers:
        log.disabled = True
    try:
        yield
    finally:
        for log, was in zip(loggers, before, strict=True):
            log.disabled = was


def _data_dependent(err: BaseException) -> bool:
    """Whether `err` (or an error it wraps) comes from code that reads tensor values."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    kinds = (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = str(err).lower()
        if isinstance(err, kinds) or "data-dependent" in text or "data dependent" in text:
            return True
        if ".item()" in text or "_local_scalar_dense" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def _model_error(err: Exception, where: str) -> DlperfError:
    """The one-line error for a failure of the user's model under fake tensors."""
    hint = (
        " (dlperf runs the model on fake tensors: code that reads tensor values, "
        "such as .item() or data-dependent shapes, cannot be traced)"
        if _data_dependent(err)
        else ""
    )
    return DlperfError(f"tracing failed in {where}: {type(err).__name__}: {first_line(err)}{hint}")


def repeated_blocks(model: nn.Module) -> list[str]:
    """Paths of the model's repeated blocks: children of a container (ModuleList
    or Sequential) that share one type, have submodules of their own, and
    number two or more (transformer layers, ResNet bottlenecks). In order."""
    found = []
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        kinds = Counter(type(c).__name__ for _, c in children)
        for name, child in children:
            if kinds[type(child).__name__] >= 2 and any(True for _ in child.children()):
                child_path = f"{path}.{name}" if path else name
                if not any(child_path.startswith(p + ".") for p in found):
                    found.append(child_path)
    return found
