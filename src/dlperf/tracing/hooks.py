"""Forward hooks that follow the model's modules as they run.

They keep the recorder's stack of running modules (forward ops are
attributed to the innermost), note each module's input size, feed the
autograd labeller (backward ops are attributed through it) and hand
recurrent layers to the recorder. While installed, mixture-of-experts layers
run as one op each (`moe`).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from .events import TensorMeta
from .labels import CallLabeller
from .moe import routed_experts
from .recorder import Recorder


class ModuleHooks:
    def __init__(self, model: nn.Module, recorder: Recorder, training: bool):
        self.model = model
        self.paths = {id(mod): name for name, mod in model.named_modules()}
        self.recorder = recorder
        self.labeller = CallLabeller() if training else None
        self.module_inputs: dict[str, int] = {}  # bytes of each module's first input
        self.module_calls: dict[str, list] = {}  # each call's tensor arguments (see Trace)

    def pre(self, module: nn.Module, hook_args) -> None:
        path = self.paths.get(id(module))
        if path is None:
            return  # a module of some other model, or built during the call
        self.recorder.stack.append(path)
        if path not in self.module_inputs:
            first = hook_args[0] if hook_args else None
            self.module_inputs[path] = first.nbytes if isinstance(first, torch.Tensor) else 0
        tensors = all(isinstance(a, torch.Tensor) for a in hook_args)
        call = [(TensorMeta.of(a), a.requires_grad) for a in hook_args] if tensors else None
        self.module_calls.setdefault(path, []).append(call)
        if self.labeller is not None:
            self.labeller.enter(hook_args)
        if isinstance(module, nn.RNNBase):
            self.recorder.enter_rnn(module, path, hook_args)

    def post(self, module: nn.Module, hook_args, output) -> None:
        path = self.paths.get(id(module))
        if path is None:
            return
        stack = self.recorder.stack
        if stack and stack[-1] == path:
            stack.pop()
        if self.labeller is not None:
            self.labeller.leave(output, path)
        if isinstance(module, nn.RNNBase):
            self.recorder.leave_rnn()

    @contextlib.contextmanager
    def installed(self):
        """The hooks, registered for every module while the block runs (and
        the model's MoE layers run as `dlperf::moe`)."""
        handles = [
            nn.modules.module.register_module_forward_pre_hook(self.pre),
            nn.modules.module.register_module_forward_hook(self.post),
        ]
        try:
            with routed_experts(self.model):
                yield self
        finally:
            for h in handles:
                h.remove()
