"""Models by name, built on the meta device (no weights, no download).

- `torchvision:NAME`: any model of torchvision.models.get_model (vision.py).
- `hf:NAME`: a Hugging Face transformers architecture built from its config
  class: presets (gpt2, bert-base-uncased, t5-small, llama-7b, mistral-7b,
  ...) or any registered model type with its default config (`hf:roberta`),
  then `:key=value,...` setting any key of the config class (`max_seq_len=8192`)
  or a short size key (`layers, hidden, heads, kv_heads, mlp, vocab,
  positions`), and `head=` choosing the task head (see HEADS). A sequence
  longer than a learned position table is refused (hf_config.py, huggingface.py).
- `timm:NAME` when timm is installed (vision.py).
- `path/to/file.py:factory`: calls `factory()` from the user's file, which
  returns a module or `(module, inputs)`. This runs the user's code; it is
  built without weights too (user_file.py).

Input shapes as text and the default sizes are in inputs.py.
"""

from __future__ import annotations

import re

from ..errors import DlperfError, InternalError, first_line, raised_by_dlperf
from .building import build_without_weights
from .hf_config import HF_PRESETS
from .huggingface import HEADS, hf_model
from .inputs import (
    DEFAULT_BATCH,
    DEFAULT_IMAGE,
    DEFAULT_IMAGE_BATCH,
    DEFAULT_SEQ_LEN,
    INPUT_DTYPES,
    MAX_INPUT_ELEMENTS,
    parse_input,
    resize_inputs,
)
from .loaded import LoadedModel
from .user_file import user_file_model
from .vision import timm_model, torchvision_model

_DTYPES = INPUT_DTYPES  # the name older readers import

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_IMAGE",
    "DEFAULT_IMAGE_BATCH",
    "DEFAULT_SEQ_LEN",
    "HEADS",
    "HF_PRESETS",
    "INPUT_DTYPES",
    "MAX_INPUT_ELEMENTS",
    "LoadedModel",
    "build_without_weights",
    "load_model",
    "parse_input",
    "resize_inputs",
]


def load_model(
    name: str,
    batch: int | None = None,
    seq_len: int | None = None,
    image_size: int | None = None,
    attention: str = "auto",
) -> LoadedModel:
    """Resolve a model name (see the module docstring) with default inputs.

    `attention` ("auto", "eager", or an SDPA backend) picks how a Hugging Face
    model's attention is built (see `huggingface._attn_implementation`); other
    models call what their code calls."""
    kind, sep, rest = name.partition(":")
    batch = batch or (DEFAULT_IMAGE_BATCH if kind in ("torchvision", "timm") else DEFAULT_BATCH)
    if re.search(r"\.py$", kind) or (sep and rest and kind.endswith(".py")):
        return user_file_model(kind, rest or "model")
    builders = {
        "torchvision": lambda: torchvision_model(rest, batch, image_size),
        "hf": lambda: hf_model(rest, batch, seq_len, attention),
        "timm": lambda: timm_model(rest, batch, image_size),
    }
    if kind in builders and rest:
        try:
            return builders[kind]()
        except DlperfError:
            raise
        except Exception as err:
            if raised_by_dlperf(err):
                raise InternalError.of(err) from err
            # a library refused the configuration
            raise DlperfError(
                f"building {name} failed: {type(err).__name__}: {first_line(err, 200)}"
            ) from None
    raise DlperfError(
        f"cannot read model name {name!r}; use torchvision:NAME, hf:NAME, timm:NAME or "
        "path/to/file.py:factory"
    )
