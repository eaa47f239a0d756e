"""A model's Hugging Face `config.json`: the file names the model (built
as `hf:PATH`) and nothing about the run. Its fields are the model's where
transformers' config class for its `model_type` takes them; any other key is
listed as ignored (transformers keeps it on the config, and no layer reads it)."""

from __future__ import annotations

import inspect

from .job import Job

# Keys every config class takes beyond its own arguments (PretrainedConfig's
# keyword arguments, older names it still reads, and what loading adds).
GENERIC = frozenset(
    {
        "_name_or_path",
        "_attn_implementation",
        "architectures",
        "auto_map",
        "torch_dtype",
        "dtype",
        "transformers_version",
        "quantization_config",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "text_config",
        "vision_config",
        "audio_config",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "tie_word_embeddings",
        "is_encoder_decoder",
        "is_decoder",
        "add_cross_attention",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "torchscript",
        "use_bfloat16",
        "tokenizer_class",
        "prefix",
        "task_specific_params",
        "finetuning_task",
        "chunk_size_feed_forward",
        "pruned_heads",
        "tie_encoder_decoder",
        "cross_attention_hidden_size",
        "max_length",
        "min_length",
        "do_sample",
        "early_stopping",
        "num_beams",
        "num_beam_groups",
        "diversity_penalty",
        "temperature",
        "top_k",
        "top_p",
        "typical_p",
        "repetition_penalty",
        "length_penalty",
        "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size",
        "bad_words_ids",
        "num_return_sequences",
        "output_scores",
        "return_dict_in_generate",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
        "initializer_range",
    }
)


def looks_like(doc: dict) -> bool:
    return "model_type" in doc


def model_keys(model_type) -> frozenset | None:
    """The keys transformers' config class for `model_type` takes; None where
    transformers has no such class."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        cls = CONFIG_MAPPING[str(model_type)]
    except (ImportError, KeyError):
        return None
    taken = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    return frozenset(taken | set(getattr(cls, "attribute_map", {}) or {}) | GENERIC)


def read(doc: dict, path: str, gpus: int | None = None) -> Job:
    """`gpus` is taken so that every format reads alike; a model's config
    says nothing the GPU count would resolve."""
    job = Job("hf-config", path, model=f"hf:{path}")
    model_type = doc.get("model_type")
    job.use("model_type", model_type, f"the model: hf:{path}")
    known = model_keys(model_type)
    name = f"transformers' config for {model_type!r}"
    for key, value in doc.items():
        if key == "model_type":
            continue
        if known is None or key in known:
            job.use(key, value, "a field of the model's config")
        else:
            job.ignore(key, value, f"unknown field: not one of {name} (no layer reads it)")
    return job
