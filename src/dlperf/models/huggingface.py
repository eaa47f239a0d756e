"""Hugging Face models by name (`hf:NAME[:key=value,...]`, see hf_config),
built from their config class with the task head chosen by `head=`."""

from __future__ import annotations

import functools
import re

import torch
from torch import nn

from ..errors import DlperfError
from ..kernels.attention_backends import REGISTRY
from .building import build_without_weights, near
from .hf_config import HF_PRESETS, SIZE_KEYS, check_head_dim, configure, parse_options
from .hub import config_fields
from .inputs import DEFAULT_SEQ_LEN
from .loaded import LoadedModel

# `head=` picks the task head: the Auto class that builds it.
HEADS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "base": "AutoModel",
}
_SEQ2SEQ_TYPES = {"t5", "bart", "mbart", "pegasus", "marian", "mt5", "longt5"}
_ENCODER_TYPES = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2"}


def _default_head(model_type: str, task: str | None, config, transformers) -> str:
    if task:
        return task
    if model_type in _SEQ2SEQ_TYPES:
        return "seq2seq-lm"
    preferred = "masked-lm" if model_type in _ENCODER_TYPES else "causal-lm"
    for head in (preferred, "causal-lm", "masked-lm", "seq2seq-lm", "base"):
        if head in _heads_of(config, transformers):
            return head
    return preferred


def _heads_of(config, transformers) -> list[str]:
    """The task heads transformers can build for this config class."""
    return [
        h for h, auto in HEADS.items() if type(config) in getattr(transformers, auto)._model_mapping
    ]


def _position_limit(config, model: nn.Module) -> int | None:
    """The longest sequence the model accepts, or None where it has no limit.

    A learned position table (GPT-2's `wpe`, BERT's `position_embeddings`,
    BART's `embed_positions`) has one row per position, and MPT sizes its
    ALiBi bias by `max_seq_len`; rotary and relative positions have no table.
    """
    size = next(
        (v for a in SIZE_KEYS["positions"] if isinstance(v := getattr(config, a, None), int)),
        None,
    )
    if not size or size <= 0:
        return None
    tables = (
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Embedding) and re.search(r"pos|wpe", name.rsplit(".", 1)[-1])
    )
    if next(tables, None) is not None or hasattr(config, "max_seq_len"):
        return size
    return None


def _config_and_head(spec: str, transformers, config_mapping):
    """The configured config of `spec` and the head to build on it."""
    name, _, options_text = spec.partition(":")
    fields = config_fields(name)  # a hub id (bundled), a config.json or a checkpoint folder
    if fields is not None:
        model_type = fields.pop("model_type")
        if model_type not in config_mapping:
            raise DlperfError(f"{name}: model_type {model_type!r} is not in this transformers")
        config = config_mapping[model_type](**fields)
        return _finish(config, model_type, None, options_text, transformers, from_file=True)
    if name in HF_PRESETS:
        model_type, task, overrides = HF_PRESETS[name]
    elif name in config_mapping:
        model_type, task, overrides = name, None, {}
    else:
        choices = list(HF_PRESETS) + list(config_mapping.keys())
        raise DlperfError(f"unknown Hugging Face model {name!r}; {near(name, choices)}")
    config = config_mapping[model_type]()
    for key, value in overrides.items():
        setattr(config, key, value)
    return _finish(config, model_type, task, options_text, transformers)


def _finish(config, model_type, task, options_text: str, transformers, from_file: bool = False):
    """The config with the spec's `key=value` options, and the head to build
    (a checkpoint's config keeps its own head size unless resized)."""
    options = parse_options(options_text)
    head = options.pop("head", None) or _default_head(model_type, task, config, transformers)
    configure(config, model_type, options, derive=not from_file)
    heads = _heads_of(config, transformers)
    if head not in heads:
        known = head in HEADS
        raise DlperfError(
            f"{'no' if known else 'unknown'} head {head!r} for {model_type}; "
            f"choose from: {', '.join(heads)}"
            + ("" if known or not head.isdigit() else f" (for attention heads: heads={head})")
        )
    if hasattr(config, "use_cache"):
        config.use_cache = False  # training keeps no key/value cache
    if head == "sequence-classification" and getattr(config, "pad_token_id", 0) is None:
        config.pad_token_id = 0  # decoders find each sequence's last token by padding
    return config, head


# The --attention choices that run through torch's SDPA (its backends).
SDPA_BACKENDS = tuple(b.name for b in REGISTRY)


def _attn_implementation(auto, config, spec: str, attention: str) -> dict:
    """The `attn_implementation` to build with: transformers' own default for
    auto (SDPA where the model class has it, else its eager code), eager on
    request; an SDPA backend asked of a class without SDPA is refused."""
    if attention == "eager":
        return {"attn_implementation": "eager"}
    if attention not in SDPA_BACKENDS:
        return {}
    if not getattr(auto._model_mapping[type(config)], "_supports_sdpa", False):
        name = spec.partition(":")[0]
        raise DlperfError(f"hf:{name} has no SDPA attention in transformers; use --attention eager")
    return {"attn_implementation": "sdpa"}


def hf_model(spec: str, batch: int, seq_len: int | None, attention: str = "auto") -> LoadedModel:
    """`hf:spec` built from its config with `attention` (see `_attn_implementation`)."""
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        raise DlperfError("transformers is not installed: pip install transformers") from None
    transformers.logging.set_verbosity_error()  # no chatter about configs on our stdout
    config, head = _config_and_head(spec, transformers, CONFIG_MAPPING)
    auto = getattr(transformers, HEADS[head])
    implementation = _attn_implementation(auto, config, spec, attention)
    model = build_without_weights(auto.from_config, config, **implementation)
    check_head_dim(model, config)
    limit = _position_limit(config, model)
    loaded = LoadedModel(
        f"hf:{spec}",
        model,
        None,
        "sequence",
        head=head,
        encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
        max_positions=limit,
        build_real=functools.partial(auto.from_config, config, **implementation),
    )
    seq = seq_len or min(DEFAULT_SEQ_LEN, limit or DEFAULT_SEQ_LEN)
    loaded.inputs = loaded.token_inputs(torch.zeros(batch, seq, dtype=torch.int64, device="meta"))
    return loaded
