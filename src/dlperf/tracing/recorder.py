"""The dispatch mode that records one OpEvent per aten call.

It sits below autograd, so forward, loss and backward calls all pass through
it with their shapes, dtypes and strides. Ops that move no data are counted,
not recorded (`views.is_free`). It also notes, per storage, the tensors
autograd saves for backward (the activation memory). Each storage gets a
small id, in order of first use (views share their storage's): events record
the ids they read and write, saved tensors theirs. Recurrent layers are
recorded at the module level (one `dlperf.rnn.*` event per layer call and
phase) and the fused ops they run are suppressed, whatever the backend.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import DlperfError
from .events import LOSS_MODULE, OpEvent, SavedTensor, TensorMeta, flat_outputs, meta, within
from .labels import backward_module
from .views import is_free

# str(func) of each aten overload seen, cached (it is asked once per call).
_NAMES: dict = {}


def _storage_key(t: torch.Tensor):
    """A key that tells storages apart (two views of one storage share it)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


class Recorder(TorchDispatchMode):
    def __init__(self, progress: Callable[[int], None] | None, module_types: dict[str, str]):
        super().__init__()
        self.phase = "forward"
        self.stack: list[str] = []  # paths of the modules running forward
        self.events: list[OpEvent] = []
        self.suppressed: Counter = Counter()
        self.rnn_paths: set[str] = set()
        self.rnn_calls: list[tuple[nn.RNNBase, str, torch.Tensor]] = []
        self.rnn_depth = 0
        self.progress = progress
        self.module_types = module_types
        self.free_ops = 0
        self.param_ids: set[int] = set()
        self.param_storages: set = set()
        self.weight_copies: set = set()
        self.masks: dict = {}  # storage key -> elements, for dropout masks
        self.saved: dict = {}  # storage key -> SavedTensor
        # storage address -> small int, in order of first use; the weak references
        # keep each storage's record, so no later storage can take its address
        self.storage_ids: dict[int, int] = {}
        self._pinned: list = []
        self.failure: Exception | None = None  # the first error while recording

    def know_params(self, params: dict[str, torch.Tensor]) -> None:
        """Note the fake parameters: autocast copies of them are weight copies,
        and saving a parameter itself costs no activation memory."""
        self.param_ids = {id(t) for t in params.values()}
        self.param_storages = {_storage_key(t) for t in params.values()}

    def pack(self, t: torch.Tensor):
        """saved_tensors_hooks pack: note each distinct storage autograd keeps."""
        key = _storage_key(t)
        if key not in self.saved and key not in self.param_storages:
            kind = "weight copy" if key in self.weight_copies else "activation"
            path = self.stack[-1] if self.stack else LOSS_MODULE
            nbytes = self.masks.get(key, t.untyped_storage().nbytes())
            self.saved[key] = SavedTensor(path, nbytes, kind, self.storage_id(t))
        return t

    def storage_id(self, t: torch.Tensor) -> int:
        """The small int that names `t`'s storage in this trace."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            # no storage of its own (a sparse tensor, a wrapper subclass): a new id
            fresh = len(self.storage_ids)
            self.storage_ids[-1 - fresh] = fresh  # addresses are positive: no clash
            return fresh
        found = self.storage_ids.get(storage._cdata)
        if found is None:
            found = self.storage_ids[storage._cdata] = len(self.storage_ids)
            self._pinned.append(_storage_key(t))
        return found

    def storage_ids_of(self, values, depth: int = 1) -> tuple[int, ...]:
        """The storage ids of the tensors among `values` (and `depth` levels of
        list or tuple in them), in the order `tensors()` and `flat_outputs` list
        their metas."""
        ids = []
        for v in values:
            if isinstance(v, torch.Tensor):
                ids.append(self.storage_id(v))
            elif depth and isinstance(v, (list, tuple)):
                ids += [self.storage_id(t) for t in v if isinstance(t, torch.Tensor)]
        return tuple(ids)

    def module_path(self) -> str:
        if self.phase == "forward":
            return self.stack[-1] if self.stack else LOSS_MODULE
        return backward_module()

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
        if is_free(name):
            self.free_ops += 1
            return
        self._note_storage(name, args, out)
        path = self.module_path()
        if self.in_rnn(path):
            self.suppressed[name] += 1
            return
        self.events.append(
            OpEvent(
                op=name,
                args=tuple(meta(a) for a in args),
                kwargs={k: meta(v) for k, v in kwargs.items()},
                outputs=flat_outputs(out),
                module=path,
                phase=self.phase,
                module_type=self.module_types.get(path, ""),
                reads=self.storage_ids_of((*args, *kwargs.values())),
                writes=self.storage_ids_of(out if isinstance(out, (list, tuple)) else (out,), 0),
            )
        )
        if self.progress and len(self.events) % 500 == 0:
            self.progress(len(self.events))

    def _note_storage(self, name: str, args, out) -> None:
        """Remember storages whose saved size is not what it seems: parameter
        casts (weight copies) and dropout masks."""
        if name == "aten._to_copy.default" and args and id(args[0]) in self.param_ids:
            self.weight_copies.add(_storage_key(out))
        elif name == "aten.native_dropout.default" and isinstance(out, tuple):
            # CUDA keeps dropout masks as bool (1 byte); the CPU kernels use the data dtype
            self.masks[_storage_key(out[1])] = out[1].numel()
        elif name.startswith("aten.bernoulli") and isinstance(out, torch.Tensor):
            self.masks[_storage_key(out)] = out.numel()

    def enter_rnn(self, module: nn.RNNBase, path: str, hook_args) -> None:
        """A recurrent layer starts: record the outermost call once, not the
        calls of the layers it runs inside."""
        if not self.rnn_depth:
            x = hook_args[0]
            self.events.append(rnn_event(module, path, x, "forward"))
            self.rnn_calls.append((module, path, x))
            self.rnn_paths.add(path)
        self.rnn_depth += 1

    def leave_rnn(self) -> None:
        self.rnn_depth -= 1

    def record_rnn_backward(self) -> None:
        """The backward of each recurrent layer call, after the loss's backward."""
        for module, path, x in self.rnn_calls:
            self.events.append(rnn_event(module, path, x, "backward"))


def rnn_event(module: nn.RNNBase, path: str, x: torch.Tensor, phase: str) -> OpEvent:
    """One recurrent layer call as a module-level event, with its configuration."""
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
    return OpEvent(
        op=f"dlperf.rnn.{mode.lower()}",
        args=(TensorMeta.of(x),),
        kwargs={},
        outputs=(),
        module=path,
        phase=phase,
        module_type=type(module).__name__,
        info=info,
    )
