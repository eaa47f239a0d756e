"""Models by name, built on the meta device (no weights, no download).

- `torchvision:NAME`: any model of torchvision.models.get_model.
- `hf:NAME`: a Hugging Face transformers architecture built from its config
  class: presets (gpt2, bert-base-uncased, t5-small, llama-7b, mistral-7b,
  ...) or any registered model type with its default config (`hf:roberta`),
  then `:key=value,...` setting any key of the config class (`max_seq_len=8192`)
  or a short size key (`layers, hidden, heads, kv_heads, mlp, vocab,
  positions`), and `head=` choosing the task head (see HEADS). A sequence
  longer than a learned position table is refused.
- `timm:NAME` when timm is installed.
- `path/to/file.py:factory`: calls `factory()` from the user's file, which
  returns a module or `(module, inputs)`. This runs the user's code; it is
  built without weights too.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.util
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .errors import DlperfError, InternalError, first_line, raised_by_dlperf

DEFAULT_IMAGE = 224
# The largest tensor an input may describe: its byte size (up to 8 B per
# element) and every count derived from it stay inside int64.
MAX_INPUT_ELEMENTS = 2**48
DEFAULT_SEQ_LEN = 512
DEFAULT_BATCH = 8
DEFAULT_IMAGE_BATCH = 32


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

    def token_inputs(self, ids: torch.Tensor) -> dict:
        """The head's keyword inputs for token ids of shape (batch, seq)."""
        if ids.dim() != 2 or ids.is_floating_point():
            raise DlperfError(
                f"{self.name} takes token ids of shape (batch, seq) such as 8x512:int64, "
                f"not {'x'.join(map(str, ids.shape))}:{str(ids.dtype).removeprefix('torch.')}"
            )
        seq = int(ids.shape[1])
        if self.max_positions and seq > self.max_positions:
            name = self.name.removeprefix("hf:")
            spec = f"{name}{',' if ':' in name else ':'}positions={seq}"
            raise DlperfError(
                f"sequence length {seq} is longer than the {self.max_positions} positions of "
                f"{self.name}; give the model more with hf:{spec}"
            )
        return _head_inputs(self.head or "causal-lm", self.encoder_decoder, ids)


# -- input shapes ----------------------------------------------------------

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int32,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
}


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
        if dtype_text.lower() not in _DTYPES:
            raise DlperfError(
                f"unknown input dtype {dtype_text!r}; choose from: {', '.join(_DTYPES)}"
            )
        dtype = _DTYPES[dtype_text.lower()]
    return torch.empty(shape, dtype=dtype, device="meta")


# -- building without weights -------------------------------------------------


class _ParametersOnMeta:
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
        with _ParametersOnMeta():
            return factory(*args, **kwargs)


# -- torchvision -------------------------------------------------------------

_IMAGE_SIZES = {"inception_v3": 299}


def _torchvision(name: str, batch: int, image: int | None) -> LoadedModel:
    try:
        import torchvision
    except ImportError:
        raise DlperfError("torchvision is not installed: pip install torchvision") from None
    names = torchvision.models.list_models()
    if name not in names:
        raise DlperfError(f"unknown torchvision model {name!r}; {_near(name, names)}")
    kwargs = (
        {"aux_logits": False, "init_weights": False}
        if name in ("inception_v3", "googlenet")
        else {}
    )
    model = build_without_weights(torchvision.models.get_model, name, weights=None, **kwargs)
    size = image or _IMAGE_SIZES.get(name, DEFAULT_IMAGE)
    x = torch.empty(batch, 3, size, size, device="meta")
    real = functools.partial(torchvision.models.get_model, name, weights=None, **kwargs)
    return LoadedModel(f"torchvision:{name}", model, x, "vision", build_real=real)


# -- Hugging Face --------------------------------------------------------------

# preset -> (model type, task head, config overrides)
HF_PRESETS = {
    "gpt2": ("gpt2", "causal-lm", {}),
    "gpt2-medium": ("gpt2", "causal-lm", {"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    "gpt2-large": ("gpt2", "causal-lm", {"n_embd": 1280, "n_layer": 36, "n_head": 20}),
    "gpt2-xl": ("gpt2", "causal-lm", {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
    "bert-base-uncased": ("bert", "masked-lm", {}),
    "bert-large-uncased": (
        "bert",
        "masked-lm",
        {
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    ),
    "t5-small": (
        "t5",
        "seq2seq-lm",
        {
            "d_model": 512,
            "d_ff": 2048,
            "num_layers": 6,
            "num_decoder_layers": 6,
            "num_heads": 8,
            "d_kv": 64,
        },
    ),
    "t5-base": (
        "t5",
        "seq2seq-lm",
        {
            "d_model": 768,
            "d_ff": 3072,
            "num_layers": 12,
            "num_decoder_layers": 12,
            "num_heads": 12,
            "d_kv": 64,
        },
    ),
    "llama-7b": (
        "llama",
        "causal-lm",
        {
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "vocab_size": 32000,
        },
    ),
    "llama-13b": (
        "llama",
        "causal-lm",
        {
            "hidden_size": 5120,
            "intermediate_size": 13824,
            "num_hidden_layers": 40,
            "num_attention_heads": 40,
            "num_key_value_heads": 40,
            "vocab_size": 32000,
        },
    ),
    "llama-70b": (
        "llama",
        "causal-lm",
        {
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
        },
    ),
    "mistral-7b": (
        "mistral",
        "causal-lm",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
        },
    ),
}
# Short keys for the usual sizes: each sets every one of these config
# attributes that the config class has (their names differ between models).
_SIZE_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "mlp": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
    "positions": ("max_position_embeddings", "n_positions", "max_seq_len"),
}
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
# Bookkeeping entries of every config's dict that describe no model.
_NOT_KEYS = {"transformers_version", "architectures", "model_type"}


def _parse_options(text: str) -> dict[str, str]:
    """'layers=2,max_seq_len=8192' -> {'layers': '2', 'max_seq_len': '8192'}."""
    options = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise DlperfError(
                f"bad option {item!r} in hf model spec; use key=value, e.g. hf:gpt2:layers=6"
            )
        options[key.strip()] = value.strip()
    return options


def _config_keys(config) -> list[str]:
    """The keys of this config class that a model spec may set."""
    keys = {k for k in config.to_dict() if not k.startswith("_") and k not in _NOT_KEYS}
    keys |= set(getattr(config, "attribute_map", {}))
    keys.add("num_labels")  # a property of every config, sizes classification heads
    return sorted(keys)


def _alias_targets(config, key: str) -> list[str]:
    return [a for a in _SIZE_KEYS[key] if hasattr(config, a)]


def _unknown_key(model_type: str, key: str, config) -> DlperfError:
    aliases = [k for k in _SIZE_KEYS if _alias_targets(config, k)]
    valid = [*aliases, "head", *_config_keys(config)]
    near = difflib.get_close_matches(key, valid, n=5, cutoff=0.5)
    hint = f"did you mean: {', '.join(near)}? " if near else ""
    return DlperfError(
        f"{model_type} configs have no key {key!r}; {hint}valid keys: {', '.join(valid)}"
    )


def _parse_value(model_type: str, key: str, text: str, current):
    """`text` as the type of the attribute's current value (guessed when it is None)."""
    what = f"{key} of {model_type} configs"
    if isinstance(current, bool):  # before int: bool is an int
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise DlperfError(f"{what} is true or false, not {text!r}")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise DlperfError(f"{what} is an integer, not {text!r}") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise DlperfError(f"{what} is a number, not {text!r}") from None
    if isinstance(current, str):
        return text
    if current is None:
        return _guess_value(text)
    raise DlperfError(f"{what} is a {type(current).__name__}, which a model spec cannot set")


def _guess_value(text: str):
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    words = {"true": True, "false": False, "none": None, "null": None}
    return words.get(text.lower(), text)


def _configure(config, model_type: str, options: dict[str, str]) -> None:
    """Set each option on the config: short size keys, then any config key."""
    valid = set(_config_keys(config))
    kv_keys = {"kv_heads", *_SIZE_KEYS["kv_heads"]}
    if "heads" in options and not kv_keys & options.keys() and _alias_targets(config, "kv_heads"):
        options = {**options, "kv_heads": options["heads"]}  # plain multi-head unless told
    chosen: set[str] = set()
    for key, text in options.items():
        if key in _SIZE_KEYS:
            targets = _alias_targets(config, key)
            if not targets:
                raise _unknown_key(model_type, key, config)
            if not text.isdigit() or int(text) <= 0:
                raise DlperfError(f"{key}={text} in hf model spec is not a positive integer")
            for attr in targets:
                setattr(config, attr, int(text))
        elif key in valid:
            setattr(config, key, _parse_value(model_type, key, text, getattr(config, key, None)))
            chosen.add(key)
        else:
            raise _unknown_key(model_type, key, config)
    head_dim = {"head_dim", getattr(config, "attribute_map", {}).get("head_dim")}
    follows = hasattr(config, "head_dim") and getattr(config, "num_attention_heads", 0)
    if follows and not chosen & head_dim:  # hidden / heads unless set explicitly
        config.head_dim = config.hidden_size // config.num_attention_heads


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
        (v for a in _SIZE_KEYS["positions"] if isinstance(v := getattr(config, a, None), int)),
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


def _hf(spec: str, batch: int, seq_len: int | None) -> LoadedModel:
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        raise DlperfError("transformers is not installed: pip install transformers") from None
    name, _, options_text = spec.partition(":")
    if name in HF_PRESETS:
        model_type, task, overrides = HF_PRESETS[name]
    elif name in CONFIG_MAPPING:
        model_type, task, overrides = name, None, {}
    else:
        choices = list(HF_PRESETS) + list(CONFIG_MAPPING.keys())
        raise DlperfError(f"unknown Hugging Face model {name!r}; {_near(name, choices)}")
    transformers.logging.set_verbosity_error()  # no chatter about configs on our stdout
    config = CONFIG_MAPPING[model_type]()
    for key, value in overrides.items():
        setattr(config, key, value)
    options = _parse_options(options_text)
    head = options.pop("head", None) or _default_head(model_type, task, config, transformers)
    _configure(config, model_type, options)
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
    auto = getattr(transformers, HEADS[head])
    model = build_without_weights(auto.from_config, config)
    limit = _position_limit(config, model)
    loaded = LoadedModel(
        f"hf:{spec}",
        model,
        None,
        "sequence",
        head=head,
        encoder_decoder=bool(getattr(config, "is_encoder_decoder", False)),
        max_positions=limit,
        build_real=functools.partial(auto.from_config, config),
    )
    seq = seq_len or min(DEFAULT_SEQ_LEN, limit or DEFAULT_SEQ_LEN)
    loaded.inputs = loaded.token_inputs(torch.zeros(batch, seq, dtype=torch.int64, device="meta"))
    return loaded


def _head_inputs(head: str, encoder_decoder: bool, ids: torch.Tensor) -> dict:
    """The keyword inputs of one training step of `head` on token ids `ids`."""
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


# -- timm and user files ---------------------------------------------------------


def _timm(name: str, batch: int, image: int | None) -> LoadedModel:
    try:
        import timm
    except ImportError:
        raise DlperfError("timm is not installed: pip install timm") from None
    names = timm.list_models()
    if name not in names:
        raise DlperfError(f"unknown timm model {name!r}; {_near(name, names)}")
    model = build_without_weights(timm.create_model, name, pretrained=False)
    size = image or model.default_cfg.get("input_size", (3, DEFAULT_IMAGE, DEFAULT_IMAGE))[-1]
    x = torch.empty(batch, 3, size, size, device="meta")
    real = functools.partial(timm.create_model, name, pretrained=False)
    return LoadedModel(f"timm:{name}", model, x, "vision", build_real=real)


def _user_file(path: str, factory: str) -> LoadedModel:
    file = Path(path)
    if not file.is_file():
        raise DlperfError(f"model file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"dlperf_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # runs the user's code, by design
    except (Exception, SystemExit) as err:
        raise DlperfError(
            f"importing {path} failed: {type(err).__name__}: {first_line(err)}"
        ) from None
    fn = getattr(module, factory, None)
    if not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise DlperfError(f"{path} has no function {factory!r}; {_near(factory, names)}")
    label = f"{path}:{factory}()"
    _check_no_arguments(fn, label)
    made, inputs = _module_and_inputs(_build_user(fn, label, file), label)

    def real() -> nn.Module:
        return _module_and_inputs(_build_user(fn, label, file, real=True), label)[0]

    return LoadedModel(f"{path}:{factory}", made, inputs, "user", build_real=real)


def _module_and_inputs(made, label: str):
    """A factory returns a module or (module, inputs)."""
    inputs = None
    if isinstance(made, tuple) and len(made) == 2:
        made, inputs = made
    if not isinstance(made, nn.Module):
        raise DlperfError(f"{label} returned {type(made).__name__}, not an nn.Module")
    return made, inputs


def _check_no_arguments(fn, label: str) -> None:
    """dlperf calls the factory with no arguments: say so before it fails."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read (some builtins): let the call tell
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    needed = [p.name for p in parameters if p.default is p.empty and p.kind not in variadic]
    if needed:
        raise DlperfError(
            f"{label} needs arguments ({', '.join(needed)}) but dlperf calls it with none; "
            "give them defaults or add a factory without arguments"
        )


def _build_user(fn, label: str, file: Path, real: bool = False):
    """The user's factory built without weights, as named models are: on the
    meta device, else with parameters sent there as they are registered (for
    constructors that compute with tensors), else as written (for factories
    that move the model to a device themselves). `real`: as written only."""
    ways = (lambda: torch.device("meta"), _ParametersOnMeta, contextlib.nullcontext)
    ways = ways[-1:] if real else ways
    for attempt, way in enumerate(ways, 1):
        try:
            with way():
                return fn()
        except (Exception, SystemExit) as err:
            if raised_by_dlperf(err):
                raise InternalError.of(err) from err
            if _out_of_memory(err):
                raise DlperfError(
                    f"{label} ran out of memory: {first_line(err, 200)}; dlperf needs no weights "
                    "or data: create tensors without a device (dlperf builds on the meta device)"
                ) from None
            if attempt == len(ways) or not isinstance(err, (NotImplementedError, RuntimeError)):
                raise DlperfError(
                    f"{label} failed{_where_in(err, file)}: {type(err).__name__}: {first_line(err)}"
                ) from None
    raise AssertionError("unreachable: the last way returns or raises")


def _out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError)
        and any(s in text for s in ("not enough memory", "allocate memory", "out of memory"))
    )


def _where_in(err: BaseException, file: Path) -> str:
    """' at model.py line 12': the innermost line of the user's file in the traceback."""
    line = None
    tb = err.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == file.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at {file.name} line {line}" if line else ""


def _near(word: str, choices) -> str:
    near = difflib.get_close_matches(word, list(choices), n=5, cutoff=0.5)
    return f"did you mean: {', '.join(near)}?" if near else "see the README for model names"


def load_model(
    name: str, batch: int | None = None, seq_len: int | None = None, image_size: int | None = None
) -> LoadedModel:
    """Resolve a model name (see the module docstring) with default inputs."""
    kind, sep, rest = name.partition(":")
    batch = batch or (DEFAULT_IMAGE_BATCH if kind in ("torchvision", "timm") else DEFAULT_BATCH)
    if re.search(r"\.py$", kind) or (sep and rest and kind.endswith(".py")):
        return _user_file(kind, rest or "model")
    builders = {
        "torchvision": lambda: _torchvision(rest, batch, image_size),
        "hf": lambda: _hf(rest, batch, seq_len),
        "timm": lambda: _timm(rest, batch, image_size),
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
