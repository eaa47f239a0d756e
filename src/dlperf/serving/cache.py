"""The KV cache a traced serving step runs with, and the inputs of each step.

A decode step is the model's forward over one new token per sequence with
`cached` tokens already in the cache; prefill is the forward over the prompt
with an empty cache. Both are traced like any forward (on fake tensors), so
whatever the model computes around its cache is priced as it runs.

`ServeCache` follows the Hugging Face `Cache` protocol (`update(key, value,
layer_idx)`, `get_seq_length()`), which HF decoders and a user's model that
takes `past_key_values` call. It behaves as an engine's preallocated cache
(FasterTransformer's, vLLM's paged blocks, HF's StaticCache): each layer's
keys and values for `cached + new` tokens exist before the step (allocated,
not recorded: allocation moves no data), the step writes only its new
tokens into them (one copy each, recorded), and attention reads all of them.
Each layer notes the shapes it saw, so the bytes a token occupies come from
the model itself (grouped-query heads, head sizes, layer count included).
"""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from ..errors import DlperfError
from ..models import LoadedModel


class ServeLayer(CacheLayerMixin):
    """One layer's cache of `cached` earlier tokens (see the module docstring)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, cached: int):
        super().__init__()
        self.cached = cached
        # (kv heads, key head size, value head size) as the model wrote them
        self.kv_shape: tuple[int, int, int] | None = None

    def lazy_initialization(self, key_states, value_states) -> None:
        new = key_states.shape[-2]
        b, heads, _, dk = key_states.shape
        self.keys = torch.empty((b, heads, self.cached + new, dk), dtype=key_states.dtype)
        dv = value_states.shape[-1]
        self.values = torch.empty(
            (b, value_states.shape[1], self.cached + new, dv), dtype=value_states.dtype
        )
        self.kv_shape = (int(heads), int(dk), int(dv))
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.cached + key_states.shape[-2]
        self.keys[:, :, self.cached : end].copy_(key_states)
        self.values[:, :, self.cached : end].copy_(value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int, *args) -> tuple[int, int]:
        return self.cached + query_length, 0

    def get_seq_length(self) -> int:
        return self.cached

    def get_max_length(self) -> int:
        return -1


class ServeCache(Cache):
    """A cache holding `cached` tokens per sequence in every layer, layers made
    as the model asks for them (so any layer count works)."""

    def __init__(self, cached: int):
        layer = type("ServeLayerOf", (ServeLayer,), {"__init__": _layer_init(cached)})
        super().__init__(layer_class_to_replicate=layer)
        self.cached = cached

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.cached

    def get_mask_sizes(self, query_length, layer_idx: int = 0) -> tuple[int, int]:
        if not isinstance(query_length, int):  # older callers pass cache positions
            query_length = int(query_length.shape[0])
        return self.cached + query_length, 0

    def __repr__(self) -> str:
        # part of the session's trace key: two cache lengths are two traces
        return f"ServeCache(cached={self.cached})"

    def kv_shapes(self) -> list[tuple[int, int, int]]:
        """(kv heads, key head size, value head size) per layer the model wrote."""
        return [layer.kv_shape for layer in self.layers if getattr(layer, "kv_shape", None)]


def _layer_init(cached: int):
    def init(self):
        ServeLayer.__init__(self, cached)

    return init


def kv_elements_per_token(shapes: list[tuple[int, int, int]]) -> int:
    """Elements one token adds to the cache over the layers traced: per layer
    kv_heads x (key head size + value head size), i.e. 2 x kv_heads x head_dim."""
    return sum(heads * (dk + dv) for heads, dk, dv in shapes)


def check_decoder(loaded: LoadedModel) -> None:
    """Refuse, in one line, a model that cannot generate with a KV cache."""
    if loaded.family == "sequence":
        if loaded.encoder_decoder:
            raise DlperfError(
                f"{loaded.name} is an encoder-decoder model; dlperf serve covers decoder-only "
                "models (GPT-2, OPT, Llama, Mistral, Mixtral ...)"
            )
        if loaded.head != "causal-lm":
            raise DlperfError(
                f"{loaded.name} has a {loaded.head} head (an encoder or a classifier), not a "
                "causal language model: dlperf serve needs a decoder such as hf:gpt2 or hf:llama-7b"
            )
        return
    if not _takes(loaded.module, "past_key_values"):
        raise DlperfError(
            f"{loaded.name}'s forward takes no past_key_values: dlperf serve needs a decoder "
            "that reads and updates a KV cache (the Hugging Face Cache protocol)"
        )


def _takes(module, name: str) -> bool:
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def context_window(loaded: LoadedModel) -> int | None:
    """The most tokens a sequence may hold when served: the position table's
    rows, else the config's `max_position_embeddings` (a rotary model computes
    further, but engines serve up to it: vLLM's max_model_len)."""
    if loaded.max_positions:
        return loaded.max_positions
    config = getattr(loaded.module, "config", None)
    size = getattr(config, "max_position_embeddings", None)
    return size if isinstance(size, int) and size > 0 else None


def check_positions(loaded: LoadedModel, tokens: int) -> None:
    """A sequence of `tokens` is refused past the model's positions."""
    limit = context_window(loaded)
    if limit and tokens > limit:
        raise DlperfError(
            f"{tokens} tokens (prompt + output) exceed the {limit} positions of "
            f"{loaded.name}; give the model more with {loaded.with_positions(tokens)}"
        )


def step_inputs(loaded: LoadedModel, batch: int, new_tokens: int, cached: int) -> dict:
    """The keyword inputs of one serving step: `new_tokens` ids per sequence of
    a batch of `batch`, with `cached` tokens in a fresh cache. Only the last
    position's logits are computed where the model allows it, as engines do."""
    check_positions(loaded, cached + new_tokens)
    ids = torch.zeros(batch, new_tokens, dtype=torch.int64, device="meta")
    inputs = {"input_ids": ids, "past_key_values": ServeCache(cached)}
    if _takes(loaded.module, "use_cache"):
        inputs["use_cache"] = True
    if loaded.family == "sequence" and _takes(loaded.module, "logits_to_keep"):
        inputs["logits_to_keep"] = 1
    return inputs
