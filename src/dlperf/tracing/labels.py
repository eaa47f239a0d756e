"""Attribute backward ops to modules through the autograd nodes that run them.

As each module call returns, the autograd nodes it created (those between its
outputs and the nodes behind its inputs) are labelled with its path; regions
already labelled by inner calls are jumped over. During backward the node
being run names the module, residual branches included (PyTorch's
ModuleTracker reports the longest open path instead, and mislabels them).
"""

from __future__ import annotations

import torch

from .events import LOSS_MODULE

# Keys of the labels in each autograd node's metadata dict.
_LABEL = "dlperf_module"
_CALL = "dlperf_call"


def grad_fns(x, found: set) -> set:
    """The autograd nodes that produced the tensors in `x` (nested containers too)."""
    if isinstance(x, torch.Tensor):
        if x.grad_fn is not None:
            found.add(x.grad_fn)
    elif isinstance(x, (list, tuple)):
        for v in x:
            grad_fns(v, found)
    elif isinstance(x, dict):
        for v in x.values():
            grad_fns(v, found)
    elif hasattr(x, "to_tuple"):  # Hugging Face ModelOutput
        grad_fns(x.to_tuple(), found)
    return found


def label_nodes(output, path: str, call: int, calls: list[set]) -> None:
    """Label the autograd nodes one module call created: those between its
    outputs and the nodes behind its inputs (`calls[call]`). Regions already
    labelled by inner calls are jumped over, from their outputs to their inputs."""
    boundary = calls[call]
    stack = list(grad_fns(output, set()))
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


def backward_module() -> str:
    """The module path of the autograd node running now, during backward.

    A node no module call created belongs to the loss, and so does work
    outside any node (the seed gradient of the loss itself)."""
    node = torch._C._current_autograd_node()
    if node is None:
        return LOSS_MODULE
    return node.metadata.get(_LABEL, LOSS_MODULE)


class CallLabeller:
    """Labels the nodes of each module call; fed by the forward hooks."""

    def __init__(self):
        self.calls: list[set] = []  # per module call: the autograd nodes behind its inputs
        self.open: list[int] = []  # the calls still running, innermost last

    def enter(self, hook_args) -> None:
        self.open.append(len(self.calls))
        self.calls.append(grad_fns(hook_args, set()))

    def leave(self, output, path: str) -> None:
        if self.open:
            label_nodes(output, path, self.open.pop(), self.calls)
