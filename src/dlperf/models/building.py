"""Building a model without weights, and naming what the user may have meant."""

from __future__ import annotations

import difflib

import torch
from torch import nn


class ParametersOnMeta:
    """Build a model with every parameter moved to the meta device as it is
    registered, while the rest of the constructor's arithmetic runs
    normally (for constructors that compute sizes with tensors)."""

    def __enter__(self):
        self.register_parameter = nn.Module.register_parameter
        original = self.register_parameter

        def register_parameter(module, name, param):
            lazy = isinstance(param, nn.parameter.UninitializedTensorMixin)
            if param is not None and not lazy:  # lazy modules have no size yet
                param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
            original(module, name, param)

        nn.Module.register_parameter = register_parameter
        return self

    def __exit__(self, *exc):
        nn.Module.register_parameter = self.register_parameter
        return False


def build_without_weights(factory, *args, **kwargs) -> nn.Module:
    """`factory(...)` on the meta device, or with parameters sent there one by one."""
    try:
        with torch.device("meta"):
            return factory(*args, **kwargs)
    except (NotImplementedError, RuntimeError):
        with ParametersOnMeta():
            return factory(*args, **kwargs)


def near(word: str, choices) -> str:
    """'did you mean: ...?' with the closest of `choices`, or where to look."""
    found = difflib.get_close_matches(word, list(choices), n=5, cutoff=0.5)
    return f"did you mean: {', '.join(found)}?" if found else "see the README for model names"
