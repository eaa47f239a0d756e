"""A trace of a model that differs from an already traced one in a few leaf
modules, made by tracing only the changed modules and splicing them in.

The advice re-analyses a model after each mechanical fix (a padded
vocabulary, an aligned linear layer, a convolution without its bias). Those
fixes replace a leaf module by one with the same inputs and outputs, so the
rest of the step is unchanged: tracing the new module alone, on the
arguments the old one was called with, gives the same events a whole new
trace would, in a fraction of the time (the counts of view ops and of
suppressed recurrent-layer internals stay the base's). Anything else (a
module called twice or with other than tensors, one that stays tied to
another's weights, a container changed) is traced whole. A fix that unties
a weight (a padded head beside the embedding it shared) drops the backward
addition that summed the tied weight's two gradients. A re-traced module's
storage ids are shifted past the base's, so none collides; its inputs and
outputs get ids of their own (the splice does not link them to the ops
around it).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .blocks import repeated_blocks
from .events import LOSS_MODULE, OpEvent, SavedTensor, Trace, within


def _signature(module: nn.Module) -> tuple:
    """What identifies a module apart from its children: its type, its
    settings and its own parameters' and buffers' shapes and dtypes."""
    own = [(n, tuple(t.shape), t.dtype) for n, t in module.named_parameters(recurse=False)]
    own += [(n, tuple(t.shape), t.dtype) for n, t in module.named_buffers(recurse=False)]
    children = tuple(name for name, _ in module.named_children())
    return type(module), module.extra_repr(), tuple(own), children


def changed_modules(old: nn.Module, new: nn.Module) -> list[str] | None:
    """The outermost module paths where `new` differs from `old`; None when
    a container changed (its children differ), which no splice can follow."""
    old_modules = dict(old.named_modules())
    changed = []
    for path, module in new.named_modules():
        if any(within(path, c) for c in changed):
            continue
        before = old_modules.get(path)
        if before is None:
            return None
        if _signature(before) != _signature(module):
            if any(True for _ in before.children()):
                return None  # a container changed: trace whole
            changed.append(path)
    return changed


def _tied(model: nn.Module, path: str) -> list[tuple[str, torch.Size]]:
    """The other modules that use a parameter of the module at `path` (tied
    weights), with that parameter's shape."""
    inside = {id(p) for p in model.get_submodule(path).parameters()}
    return [
        (name.rpartition(".")[0], p.shape)
        for name, p in model.named_parameters(remove_duplicate=False)
        if id(p) in inside and not within(name.rpartition(".")[0], path)
    ]


def _untied_accumulations(base: Trace, old: nn.Module, new: nn.Module, paths) -> list | None:
    """The backward additions that summed a tied weight's two gradients, for
    the weights a fix unties (a padded head no longer shares the embedding):
    the new model does not run them. None when a changed module stays tied
    (its partner changes with it, and the splice cannot follow)."""
    dropped = []
    for path in paths:
        if _tied(new, path):
            return None
        for owner, shape in _tied(old, path):
            found = next(
                (
                    e
                    for e in base.events
                    if e.phase == "backward"
                    and e.module == owner
                    and e.op.startswith("aten.add")
                    and [t.shape for t in e.tensors()] == [tuple(shape)] * 2
                    and not any(e is d for d in dropped)
                ),
                None,
            )
            if found is None:
                return None
            dropped.append(found)
    return dropped


def splice(base: Trace, old: nn.Module, new: nn.Module, retrace) -> Trace | None:
    """The trace of `new` from `base` (the trace of `old`), or None when the
    change cannot be spliced. `retrace(module, inputs)` traces a module alone
    with the base's precision and training mode."""
    paths = changed_modules(old, new)
    if not paths:
        return None
    untied = _untied_accumulations(base, old, new, paths)
    if untied is None:
        return None
    if untied:
        base = dataclasses.replace(
            base, events=[e for e in base.events if not any(e is u for u in untied)]
        )
    pieces = {}
    for path in paths:
        calls = base.module_calls.get(path, [])
        if len(calls) != 1 or calls[0] is None:
            return None  # called twice or with other values: trace whole
        args = tuple(
            torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta").requires_grad_(g)
            for m, g in calls[0]
        )
        pieces[path] = retrace(new.get_submodule(path), args[0] if len(args) == 1 else args)
    return _spliced(base, new, pieces)


def _under(path: str, prefix: str) -> str:
    """A path of a module traced alone, as a path inside the whole model."""
    return prefix if not path else f"{prefix}.{path}"


def _storage_count(trace: Trace) -> int:
    """One more than the largest storage id in a trace (0 when it has none)."""
    ids = [i for e in trace.events for i in (*e.reads, *e.writes)]
    ids += [t.storage for t in trace.saved]
    return max(ids, default=-1) + 1


def _shifted(event: OpEvent, module: str, shift: int) -> OpEvent:
    """A re-traced module's event as one of the whole model: its path inside the
    model, its storage ids past the base's (the storages it shares with the rest
    of the model, its inputs and outputs, get new ids: the splice cannot match them)."""
    return dataclasses.replace(
        event,
        module=module,
        reads=tuple(i + shift for i in event.reads),
        writes=tuple(i + shift for i in event.writes),
    )


def _spliced(base: Trace, new: nn.Module, pieces: dict[str, Trace]) -> Trace:
    def replaced(path: str) -> bool:
        return any(within(path, p) for p in pieces)

    # A piece's storage ids start from 0 like the base's: shift each past all before it
    first_id, shifts = _storage_count(base), {}
    for owner, piece in pieces.items():
        shifts[owner] = first_id
        first_id += _storage_count(piece)
    events: list[OpEvent] = []
    placed: set = set()
    for event in base.events:
        if not replaced(event.module):
            events.append(event)
            continue
        owner = next(p for p in pieces if within(event.module, p))
        if (owner, event.phase) not in placed:  # the new module's ops where the old ones ran
            placed.add((owner, event.phase))
            events += [
                _shifted(e, _under(e.module, owner), shifts[owner])
                for e in pieces[owner].events
                if e.phase == event.phase and e.module != LOSS_MODULE
            ]
    saved = [t for t in base.saved if not replaced(t.module)]
    module_inputs = {k: v for k, v in base.module_inputs.items() if not replaced(k) or k in pieces}
    module_calls = {k: v for k, v in base.module_calls.items() if not replaced(k) or k in pieces}
    for owner, piece in pieces.items():
        saved += [
            SavedTensor(_under(t.module, owner), t.nbytes, t.kind, t.storage + shifts[owner])
            for t in piece.saved
            if t.module != LOSS_MODULE
        ]
        for path, size in piece.module_inputs.items():
            module_inputs.setdefault(_under(path, owner), size)
        for path, calls in piece.module_calls.items():
            module_calls.setdefault(_under(path, owner), calls)
    params = list(new.parameters())
    return dataclasses.replace(
        base,
        events=events,
        params=sum(p.numel() for p in params),
        trainable_params=sum(p.numel() for p in params if p.requires_grad),
        param_shapes=[tuple(p.shape) for p in params],
        trainable_shapes=[tuple(p.shape) for p in params if p.requires_grad],
        module_types={name: type(m).__name__ for name, m in new.named_modules()},
        saved=saved,
        module_inputs=module_inputs,
        blocks=repeated_blocks(new),
        module_calls=module_calls,
    )
