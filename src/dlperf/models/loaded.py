"""`LoadedModel`: a model built without weights, with its default inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import DlperfError
from .inputs import head_inputs


@dataclass
class LoadedModel:
    name: str
    module: nn.Module
    inputs: object  # tensor, tuple or dict of (meta) tensors
    family: str  # "vision", "sequence", "user"
    head: str = ""  # Hugging Face task head (see HEADS)
    encoder_decoder: bool = False
    max_positions: int | None = None  # longest sequence a position table allows
    # The same model with real, initialised weights, for running it (`measure`):
    # a meta model's custom parameters have no reset_parameters to refill them.
    build_real: Callable[[], nn.Module] | None = None

    def with_positions(self, positions: int) -> str:
        """The model's name with `positions` set: what to give for longer sequences."""
        base, _, spec = self.name.removeprefix("hf:").partition(":")
        keys = [kv for kv in spec.split(",") if kv and not kv.startswith("positions=")]
        return f"hf:{base}:{','.join([*keys, f'positions={positions}'])}"

    def token_inputs(self, ids: torch.Tensor) -> dict:
        """The head's keyword inputs for token ids of shape (batch, seq)."""
        if ids.dim() != 2 or ids.is_floating_point():
            raise DlperfError(
                f"{self.name} takes token ids of shape (batch, seq) such as 8x512:int64, "
                f"not {'x'.join(map(str, ids.shape))}:{str(ids.dtype).removeprefix('torch.')}"
            )
        seq = int(ids.shape[1])
        if self.max_positions and seq > self.max_positions:
            raise DlperfError(
                f"sequence length {seq} is longer than the {self.max_positions} positions of "
                f"{self.name}; give the model more with {self.with_positions(seq)}"
            )
        return head_inputs(self.head or "causal-lm", self.encoder_decoder, ids)
