"""What a trace is made of: tensor metadata, op events, saved tensors, the Trace.

These are plain values, read by the costing (`ops/`), the analysis, the memory
model and the advice; nothing here runs a model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from ..precision import Precision

PHASES = ("forward", "backward", "optimizer")
# The module path of the ops the loss runs (outside every module of the model).
LOSS_MODULE = "(loss)"


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]
    # Where the tensor starts in its storage, in elements: tells apart two views
    # of one storage with the same shape (the halves of a chunk). Not part of
    # equality: two metas describe the same kind of tensor wherever it starts.
    offset: int = field(default=0, compare=False)

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        shape = tuple(int(s) for s in t.shape)
        return cls(shape, t.dtype, tuple(int(s) for s in t.stride()), int(t.storage_offset()))

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
    # The storages the call read and wrote, as small ints unique within a trace
    # (views share their storage's id): `reads` line up with `tensors()`,
    # `writes` with `outputs`. Empty for events not recorded from aten calls.
    reads: tuple[int, ...] = ()
    writes: tuple[int, ...] = ()

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
    storage: int = -1  # the storage's id in the trace's events (`OpEvent.reads`)


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
    # Per module, the positional tensor arguments of each call, as (meta,
    # requires_grad) pairs; None for a call that also took other values.
    module_calls: dict[str, list] = field(default_factory=dict)
    # The shapes of the parameters that train (frozen ones get no gradient and no
    # optimizer state); empty in a trace built without them: see `trained_shapes`.
    trainable_shapes: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def trained_shapes(self) -> list[tuple[int, ...]]:
        """The shapes the optimizer steps, clipping reads and zero_grad zeroes."""
        if self.trainable_shapes or not self.trainable_params:
            return self.trainable_shapes
        return self.param_shapes  # a trace that did not record them: all train

    @property
    def activation_bytes(self) -> int:
        return sum(t.nbytes for t in self.saved if t.kind == "activation")

    @property
    def saved_ids(self) -> frozenset[int]:
        """The storage ids autograd keeps for backward (parameters excluded)."""
        return frozenset(t.storage for t in self.saved if t.storage >= 0)


def meta(x):
    """An aten call's argument as recorded: tensors become TensorMeta, other
    plain values stay, anything else is kept as its repr."""
    if isinstance(x, torch.Tensor):
        return TensorMeta.of(x)
    if isinstance(x, (list, tuple)):
        return type(x)(meta(v) for v in x) if not hasattr(x, "_fields") else tuple(map(meta, x))
    if isinstance(x, (int, float, bool, str)) or x is None:
        return x
    if isinstance(x, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return x
    return repr(x)


def storage_sizes(events: list[OpEvent]) -> dict[int, int]:
    """Each storage's bytes: the largest tensor an event writes into it (one
    output per written storage; otherwise each takes the largest output)."""
    sizes: dict[int, int] = {}
    for e in events:
        if len(e.writes) == len(e.outputs):
            pairs = zip(e.writes, (o.nbytes for o in e.outputs), strict=True)
        else:
            largest = max((o.nbytes for o in e.outputs), default=0)
            pairs = ((sid, largest) for sid in e.writes)
        for sid, nbytes in pairs:
            sizes[sid] = max(sizes.get(sid, 0), nbytes)
    return sizes


def flat_outputs(out) -> tuple[TensorMeta, ...]:
    """The tensors an aten call returned (one level of tuple or list)."""
    if isinstance(out, torch.Tensor):
        return (TensorMeta.of(out),)
    if isinstance(out, (list, tuple)):
        return tuple(TensorMeta.of(t) for t in out if isinstance(t, torch.Tensor))
    return ()
