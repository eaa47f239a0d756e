"""Models by name, built on the meta device (no weights, no download).

- `torchvision:NAME`: any model of torchvision.models.get_model.
- `hf:NAME`: a Hugging Face transformers architecture built from its config
  class: presets (gpt2, bert-base-uncased, t5-small, llama-7b, mistral-7b,
  ...), any registered model type with its default config (`hf:roberta`),
  and explicit sizes: `hf:llama:layers=32,hidden=4096,heads=32,mlp=11008,vocab=32000`.
- `timm:NAME` when timm is installed.
- `path/to/file.py:factory`: calls `factory()` from the user's file, which
  returns a module or `(module, inputs)`. This runs the user's code.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .errors import DlperfError

DEFAULT_IMAGE = 224
DEFAULT_SEQ_LEN = 512
DEFAULT_BATCH = 8
DEFAULT_IMAGE_BATCH = 32


@dataclass
class LoadedModel:
    name: str
    module: nn.Module
    inputs: object  # tensor, tuple or dict of (meta) tensors
    family: str  # "vision", "sequence", "user"


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
    """Build a model with every parameter and buffer moved to the meta device
    as it is registered, while the rest of the constructor's arithmetic runs
    normally (for constructors that compute sizes with tensors)."""

    def __enter__(self):
        self.register_parameter = nn.Module.register_parameter
        original = self.register_parameter

        def register_parameter(module, name, param):
            if param is not None:
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
    return LoadedModel(f"torchvision:{name}", model, x, "vision")


# -- Hugging Face --------------------------------------------------------------

# preset -> (model type, task, config overrides)
HF_PRESETS = {
    "gpt2": ("gpt2", "causal", {}),
    "gpt2-medium": ("gpt2", "causal", {"n_embd": 1024, "n_layer": 24, "n_head": 16}),
    "gpt2-large": ("gpt2", "causal", {"n_embd": 1280, "n_layer": 36, "n_head": 20}),
    "gpt2-xl": ("gpt2", "causal", {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
    "bert-base-uncased": ("bert", "masked", {}),
    "bert-large-uncased": (
        "bert",
        "masked",
        {
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    ),
    "t5-small": (
        "t5",
        "seq2seq",
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
        "seq2seq",
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
        "causal",
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
        "causal",
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
        "causal",
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
        "causal",
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
# Short keys for explicit sizes, per the config classes' own names.
_SIZE_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv_heads": ("num_key_value_heads",),
    "mlp": ("intermediate_size", "n_inner", "d_ff"),
    "vocab": ("vocab_size",),
    "positions": ("max_position_embeddings", "n_positions"),
}
_TASKS = {
    "causal": "AutoModelForCausalLM",
    "masked": "AutoModelForMaskedLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
}
_SEQ2SEQ_TYPES = {"t5", "bart", "mbart", "pegasus", "marian", "mt5", "longt5"}
_ENCODER_TYPES = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2"}


def _parse_sizes(text: str) -> dict[str, int]:
    sizes = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in _SIZE_KEYS or not value.isdigit():
            raise DlperfError(
                f"bad size {item!r} in hf model spec; use key=number with keys "
                f"{', '.join(_SIZE_KEYS)}"
            )
        sizes[key] = int(value)
    return sizes


def _hf(spec: str, batch: int, seq_len: int | None) -> LoadedModel:
    try:
        import transformers
        from transformers import CONFIG_MAPPING
    except ImportError:
        raise DlperfError("transformers is not installed: pip install transformers") from None
    name, _, sizes_text = spec.partition(":")
    if name in HF_PRESETS:
        model_type, task, overrides = HF_PRESETS[name]
    elif name in CONFIG_MAPPING:
        model_type, overrides = name, {}
        task = (
            "seq2seq"
            if name in _SEQ2SEQ_TYPES
            else "masked"
            if name in _ENCODER_TYPES
            else "causal"
        )
    else:
        choices = list(HF_PRESETS) + list(CONFIG_MAPPING.keys())
        raise DlperfError(f"unknown Hugging Face model {name!r}; {_near(name, choices)}")
    transformers.logging.set_verbosity_error()  # no chatter about configs on our stdout
    config = CONFIG_MAPPING[model_type]()
    for key, value in overrides.items():
        setattr(config, key, value)
    sizes = _parse_sizes(sizes_text)
    if "heads" in sizes and "kv_heads" not in sizes and hasattr(config, "num_key_value_heads"):
        sizes["kv_heads"] = sizes["heads"]  # plain multi-head attention unless told
    for key, value in sizes.items():
        targets = [a for a in _SIZE_KEYS[key] if hasattr(config, a)]
        if not targets:
            raise DlperfError(f"{model_type} configs have no {key} size")
        for attr in targets:
            setattr(config, attr, value)
    if hasattr(config, "head_dim") and getattr(config, "num_attention_heads", 0):
        config.head_dim = config.hidden_size // config.num_attention_heads
    if hasattr(config, "use_cache"):
        config.use_cache = False  # training keeps no key/value cache
    seq = seq_len or min(DEFAULT_SEQ_LEN, _max_positions(config))
    auto = getattr(transformers, _TASKS[task])
    model = build_without_weights(auto.from_config, config)
    ids = torch.zeros(batch, seq, dtype=torch.int64, device="meta")
    inputs = {"input_ids": ids, "labels": ids}
    if task == "seq2seq":
        inputs["decoder_input_ids"] = ids
    return LoadedModel(f"hf:{spec}", model, inputs, "sequence")


def _max_positions(config) -> int:
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_SEQ_LEN


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
    return LoadedModel(
        f"timm:{name}", model, torch.empty(batch, 3, size, size, device="meta"), "vision"
    )


def _user_file(path: str, factory: str) -> LoadedModel:
    file = Path(path)
    if not file.is_file():
        raise DlperfError(f"model file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"dlperf_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # runs the user's code, by design
    except Exception as err:
        raise DlperfError(f"importing {path} failed: {type(err).__name__}: {err}") from None
    fn = getattr(module, factory, None)
    if not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise DlperfError(f"{path} has no function {factory!r}; {_near(factory, names)}")
    made = fn()
    inputs = None
    if isinstance(made, tuple) and len(made) == 2:
        made, inputs = made
    if not isinstance(made, nn.Module):
        raise DlperfError(f"{path}:{factory}() returned {type(made).__name__}, not an nn.Module")
    return LoadedModel(f"{path}:{factory}", made, inputs, "user")


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
        except Exception as err:  # a library refused the configuration
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise DlperfError(f"building {name} failed: {type(err).__name__}: {first}") from None
    raise DlperfError(
        f"cannot read model name {name!r}; use torchvision:NAME, hf:NAME, timm:NAME or "
        "path/to/file.py:factory"
    )
