"""The Hugging Face model spec: presets and `key=value` options on a config.

`hf:NAME[:key=value,...]`: NAME is a preset (HF_PRESETS) or a registered
model type with its default config; each key sets a key of the config class
or a short size key (`layers, hidden, heads, kv_heads, mlp, vocab, positions`,
and for mixtures of experts `experts, top_k, expert_mlp`).
"""

from __future__ import annotations

import difflib

from ..errors import DlperfError

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
    # Mixtral-8x7B (Jiang et al. 2024, "Mixtral of Experts", table 1): 46.7B
    # parameters, 8 experts of SwiGLU FFN size 14336, 2 per token.
    "mixtral": (
        "mixtral",
        "causal-lm",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
        },
    ),
}
# Short keys for the usual sizes: each sets every one of these config
# attributes that the config class has (their names differ between models).
SIZE_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "mlp": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
    "positions": ("max_position_embeddings", "n_positions", "max_seq_len"),
    # mixture of experts: experts per layer, experts per token, each expert's FFN size
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok",),
    "expert_mlp": ("moe_intermediate_size",),
}
# Bookkeeping entries of every config's dict that describe no model.
_NOT_KEYS = {"transformers_version", "architectures", "model_type"}


def parse_options(text: str) -> dict[str, str]:
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
    return [a for a in SIZE_KEYS[key] if hasattr(config, a)]


def _unknown_key(model_type: str, key: str, config) -> DlperfError:
    aliases = [k for k in SIZE_KEYS if _alias_targets(config, k)]
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


def _layers(config) -> int | None:
    found = [getattr(config, a) for a in _alias_targets(config, "layers")]
    return found[0] if found and isinstance(found[0], int) else None


def _follow_layers(config, before: int | None, chosen: set[str]) -> None:
    """Per-layer lists the config's constructor derived from its layer count
    (Qwen3's and Gemma's `layer_types`) follow a new count: their pattern
    repeated from the first layer, unless the spec set the list itself."""
    after = _layers(config)
    if before is None or after is None or after == before:
        return
    for key, value in config.to_dict().items():
        if key not in chosen and isinstance(value, list) and len(value) == before and before:
            setattr(config, key, [value[i % before] for i in range(after)])


def configure(config, model_type: str, options: dict[str, str], derive: bool = True) -> None:
    """Set each option on the config: short size keys, then any config key.
    The head size follows hidden / heads unless set, or, with `derive` off (a
    checkpoint's own config), unless the options resize either."""
    valid = set(_config_keys(config))
    kv_keys = {"kv_heads", *SIZE_KEYS["kv_heads"]}
    if "heads" in options and not kv_keys & options.keys() and _alias_targets(config, "kv_heads"):
        options = {**options, "kv_heads": options["heads"]}  # plain multi-head unless told
    chosen: set[str] = set()
    layers_before = _layers(config)
    for key, text in options.items():
        if key in SIZE_KEYS:
            targets = _alias_targets(config, key)
            if not targets:
                raise _unknown_key(model_type, key, config)
            for attr in targets:
                setattr(config, attr, _positive(key, text))
        elif key in valid:
            setattr(config, key, _parse_value(model_type, key, text, getattr(config, key, None)))
            chosen.add(key)
        elif key == "head_dim" and getattr(config, "num_attention_heads", None):
            # attention code that reads it where the config class does not declare it
            # (Qwen3-MoE's `getattr(config, "head_dim", hidden // heads)`);
            # `check_head_dim` refuses it after the build where the model ignored it
            config.head_dim = _positive(key, text)
            config._dlperf_undeclared_head_dim = True  # checked once built (`check_head_dim`)
            chosen.add(key)
        else:
            raise _unknown_key(model_type, key, config)
    _follow_layers(config, layers_before, chosen)
    head_dim = {"head_dim", getattr(config, "attribute_map", {}).get("head_dim")}
    # a config that derives head_dim itself (Falcon's read-only property) needs nothing
    derived = isinstance(getattr(type(config), "head_dim", None), property)
    follows = hasattr(config, "head_dim") and getattr(config, "num_attention_heads", 0)
    sizes = {"hidden", "heads", *SIZE_KEYS["hidden"], *SIZE_KEYS["heads"]}
    resized = bool(sizes & options.keys())
    # multi-head latent attention (DeepSeek-V2/V3): the heads' widths are their own
    # keys, and head_dim is the rotary part's (`qk_rope_head_dim`), not hidden / heads
    latent = getattr(config, "qk_rope_head_dim", None)
    if resized and not chosen & head_dim and not latent:
        _check_heads_divide(config, "hidden", "heads", "each head is hidden / heads wide")
    if kv_keys & options.keys() or resized:
        _check_heads_divide(config, "heads", "kv_heads", "query heads share key/value heads")
    derive = derive or resized
    if derive and follows and not derived and not chosen & head_dim:  # hidden / heads
        config.head_dim = latent or config.hidden_size // config.num_attention_heads


def _positive(key: str, text: str) -> int:
    """A size key's value, refused in one line unless a positive integer."""
    if not text.isdigit() or int(text) <= 0:
        raise DlperfError(f"{key}={text} in hf model spec is not a positive integer")
    return int(text)


def check_head_dim(model, config) -> None:
    """A `head_dim` the config class does not declare is refused where the built
    model's query projection did not take it (its code never read it)."""
    if not getattr(config, "_dlperf_undeclared_head_dim", False):
        return
    wanted = config.head_dim * config.num_attention_heads
    widths = {m.out_features for name, m in model.named_modules()
              if name.endswith("q_proj") and hasattr(m, "out_features")}  # fmt: skip
    if wanted not in widths:
        found = f"its query projection is {max(widths)} wide" if widths else "it has no q_proj"
        raise DlperfError(
            f"{config.model_type}'s attention does not read head_dim ({found}, not heads x "
            f"head_dim = {wanted}); drop head_dim"
        )


def _size(config, key: str) -> int | None:
    found = [getattr(config, a) for a in _alias_targets(config, key)]
    return found[0] if found and isinstance(found[0], int) and found[0] > 0 else None


def _check_heads_divide(config, whole: str, part: str, why: str) -> None:
    """Refuse a spec whose `part` size does not divide its `whole` size."""
    total, count = _size(config, whole), _size(config, part)
    if total and count and total % count:
        raise DlperfError(
            f"{whole} {total} is not divisible by {part}={count} ({why}); "
            f"give a {part} that divides {total}"
        )
