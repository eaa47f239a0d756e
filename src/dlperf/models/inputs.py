"""A model's inputs: shapes given as text, the default sizes, resizing, and
the keyword inputs of a Hugging Face task head."""

from __future__ import annotations

import math

import torch

from ..dtypes import torch_dtype
from ..errors import DlperfError

DEFAULT_IMAGE = 224
# The largest tensor an input may describe: its byte size (up to 8 B per
# element) and every count derived from it stay inside int64.
MAX_INPUT_ELEMENTS = 2**48
DEFAULT_SEQ_LEN = 512
DEFAULT_BATCH = 8
DEFAULT_IMAGE_BATCH = 32

# The dtype names an input shape may end with (`dtypes.torch_dtype` knows
# what each means); torch's own names and the usual short forms.
INPUT_DTYPE_NAMES = (
    "float32",
    "fp32",
    "float",
    "float16",
    "fp16",
    "half",
    "bfloat16",
    "bf16",
    "int64",
    "long",
    "int32",
    "int",
    "bool",
    "uint8",
    "int8",
)
INPUT_DTYPES = {name: torch_dtype(name) for name in INPUT_DTYPE_NAMES}


def parse_input(text: str) -> torch.Tensor:
    """'8x3x224x224' or '4x128:int64' -> a meta tensor of that shape and dtype."""
    shape_text, _, dtype_text = text.partition(":")
    try:
        shape = [int(s) for s in shape_text.lower().split("x")]
    except ValueError:
        raise DlperfError(
            f"input shape {text!r} is not like 8x3x224x224 (sizes joined by 'x', optional ':int64')"
        ) from None
    if not shape or any(s <= 0 for s in shape):
        raise DlperfError(f"input shape {text!r} has a size that is not positive")
    if math.prod(shape) > MAX_INPUT_ELEMENTS:
        raise DlperfError(
            f"input shape {text!r} has {math.prod(shape):.3g} elements, more than the "
            f"{MAX_INPUT_ELEMENTS:.3g} dlperf can count (int64 byte sizes); use a smaller shape"
        )
    dtype = torch.float32
    if dtype_text:
        if dtype_text.lower() not in INPUT_DTYPES:
            raise DlperfError(
                f"unknown input dtype {dtype_text!r}; choose from: {', '.join(INPUT_DTYPES)}"
            )
        dtype = INPUT_DTYPES[dtype_text.lower()]
    return torch.empty(shape, dtype=dtype, device="meta")


def resize_inputs(inputs, batch: int | None = None, seq_len: int | None = None):
    """Meta tensors like `inputs` with dim 0 = batch (and dim 1 = seq_len for
    integer token tensors), for tracing the same model at another size, in
    the same memory format."""

    def resize(t):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            return t
        shape = list(t.shape)
        if batch:
            shape[0] = batch
        if seq_len and t.dim() >= 2 and not t.is_floating_point():
            shape[1] = seq_len
        out = torch.empty(shape, dtype=t.dtype, device="meta")
        if (
            t.dim() == 4
            and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last)
        ):  # an NHWC image batch stays NHWC (`--channels-last`)
            out = out.contiguous(memory_format=torch.channels_last)
        return out

    if isinstance(inputs, dict):
        return {k: resize(v) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(resize(v) for v in inputs)
    return resize(inputs)


def head_inputs(head: str, encoder_decoder: bool, ids: torch.Tensor) -> dict:
    """The keyword inputs of one training step of a Hugging Face task `head`
    on token ids `ids`."""
    per_sequence = torch.zeros(ids.shape[0], dtype=torch.int64, device=ids.device)
    inputs = {"input_ids": ids}
    if head in ("causal-lm", "masked-lm", "seq2seq-lm", "token-classification"):
        inputs["labels"] = ids  # one label per token
    elif head == "sequence-classification":
        inputs["labels"] = per_sequence
    elif head == "question-answering":
        inputs["start_positions"] = inputs["end_positions"] = per_sequence
    if encoder_decoder:  # the decoder reads the same tokens (no shifting needed for shapes)
        inputs["decoder_input_ids"] = ids
    return inputs
