"""llm-foundry's training YAML (`scripts/train/yamls/pretrain/mpt-*.yaml`).

Composer trains `mpt_causal_lm` with FSDP (`fsdp_config`), its
`mixed_precision` PURE (bf16 parameters, gradients reduced in bf16), DEFAULT
(bf16 compute, fp32 reduction) or FULL (fp32 parameters under autocast);
`device_train_microbatch_size` samples per forward, accumulated up to
`global_train_batch_size`; attention by `attn_config.attn_impl`; the loss
flash-attn's fused cross-entropy unless `loss_fn: torch_crossentropy`.

MPT is built as GPT-2's blocks sized as MPT (learned positions, LayerNorm, a
4x MLP with exact GELU, the head tied to the embedding, no dropout), as
`bench/mpt.py` does: transformers' own MPT class runs ALiBi in its eager
attention code only, where llm-foundry runs flash attention.
"""

from __future__ import annotations

import re

from .job import NOT_PRICED, Job, bad, positive

PRECISION = {"amp_bf16": "amp-bf16", "amp_fp16": "amp-fp16", "fp32": "fp32", "amp_fp8": "fp8"}
SHARDING = {"FULL_SHARD": "fsdp", "HYBRID_SHARD": "hsdp", "SHARD_GRAD_OP": "zero2"}
SHARDING["NO_SHARD"] = "none"
ATTENTION = {"flash": "auto", "triton": "triton", "torch": "eager"}
LOSSES = {"fused_crossentropy": "fused", "torch_crossentropy": "eager"}
OPTIMIZERS = {"decoupled_adamw": "adamw", "adamw": "adamw", "decoupled_lionw": "sgd-momentum"}
BOOKKEEPING = {
    "data_local", "data_remote", "run_name", "global_seed", "seed", "tokenizer",
    "train_loader", "eval_loader", "scheduler", "max_duration", "eval_interval",
    "eval_first", "eval_subset_num_batches", "device_eval_batch_size", "progress_bar",
    "log_to_console", "console_log_interval", "callbacks", "loggers", "save_folder",
    "save_interval", "save_num_checkpoints_to_keep", "load_path", "dist_timeout",
    "variables", "icl_tasks", "eval_gauntlet",
}  # fmt: skip
MODEL_SIZES = ("d_model", "n_heads", "n_layers", "expansion_ratio", "vocab_size")


def looks_like(doc) -> bool:
    if not isinstance(doc, dict):  # YAML parses to a list or a scalar as readily
        return False
    model = doc.get("model")
    return isinstance(model, dict) and (
        "global_train_batch_size" in doc or str(model.get("name", "")).startswith("mpt")
    )


def resolve_references(doc: dict) -> dict:
    """OmegaConf's `${name}` (or `${variables.name}`) references to the
    document's own values, resolved as plain text (no code runs)."""
    variables = doc.get("variables", {}) if isinstance(doc.get("variables"), dict) else {}

    def lookup(match):
        key = match.group(1).removeprefix("variables.")
        value = variables.get(key, doc.get(key))
        return match.group(0) if value is None or isinstance(value, dict) else str(value)

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and "${" in value:
            text = re.sub(r"\$\{([\w.]+)\}", lookup, value)
            return int(text) if text.isdigit() else text
        return value

    return walk(doc)


def _algorithms(job: Job, algorithms: dict) -> None:
    """Composer's algorithms: gradient clipping is priced; the others change no step."""
    for name, value in algorithms.items() if isinstance(algorithms, dict) else ():
        if name == "gradient_clipping":
            threshold = value.get("clipping_threshold", 1.0) if isinstance(value, dict) else value
            job.clip_grad(f"algorithms.{name}", threshold)
        else:
            job.ignore(f"algorithms.{name}", value, NOT_PRICED)


def read(doc: dict, path: str, gpus: int | None) -> Job:
    doc = resolve_references(doc)
    job = Job("llm-foundry", path)
    _model(job, doc.get("model") or {}, path)
    for key, value in doc.items():
        if key == "model":
            continue
        if key in BOOKKEEPING:
            job.ignore(key, value, NOT_PRICED)
        elif key == "max_seq_len":
            job.options["seq_len"] = positive(path, key, value)
            job.use(key, value, f"--seq-len {value}")
        elif key == "global_train_batch_size":
            job.global_batch = positive(path, key, value)
            job.use(key, value, f"--global-batch {value}")
        elif key == "device_train_microbatch_size":
            if value == "auto":
                job.ignore(key, value, "Composer finds it at run time: give --micro-batch")
            else:
                job.micro_batch = positive(path, key, value)
                job.use(key, value, f"micro-batch {value} per GPU")
        elif key == "precision":
            if value not in PRECISION:
                raise bad(path, key, f"expected one of {', '.join(PRECISION)}, got {value!r}")
            job.options.setdefault("precision", PRECISION[value])
            job.use(key, value, f"--precision {PRECISION[value]}")
        elif key == "algorithms":
            _algorithms(job, value or {})
        elif key == "fsdp_config":
            _fsdp(job, value or {}, path, gpus)
        elif key == "optimizer":
            _optimizer(job, value or {})
        elif key == "compile_config":
            job.options["compile"] = True
            job.use(key, value, "--compile")
        else:
            job.ignore(key, value, "unknown field: not an llm-foundry option dlperf knows")
    job.options.setdefault("loss", "fused")  # ComposerMPTCausalLM's default loss_fn
    if gpus and "dp" not in job.parallel:
        job.parallel["dp"] = gpus
    return job


def _model(job: Job, model: dict, path: str) -> None:
    if model.get("name") != "mpt_causal_lm":
        raise bad(path, "model.name", f"dlperf reads mpt_causal_lm, got {model.get('name')!r}")
    sizes = {}
    for key in MODEL_SIZES:
        if key not in model:
            raise bad(path, f"model.{key}", "missing (MPT's size)")
        sizes[key] = positive(path, f"model.{key}", model[key])
    seq = model.get("max_seq_len", 2048)
    d = sizes["d_model"]
    job.model = (
        f"hf:gpt2:n_embd={d},n_layer={sizes['n_layers']},n_head={sizes['n_heads']},"
        f"n_inner={sizes['expansion_ratio'] * d},vocab_size={sizes['vocab_size']},"
        f"n_positions={seq},activation_function=gelu,attn_pdrop=0,resid_pdrop=0,embd_pdrop=0"
    )
    for key, value in model.items():
        name = f"model.{key}"
        if key in (*MODEL_SIZES, "name", "max_seq_len"):
            job.use(name, value, "the model's size (GPT-2's blocks sized as MPT)")
        elif key == "attn_config":
            impl = (value or {}).get("attn_impl", "flash")
            job.mapped(path, f"{name}.attn_impl", impl, ATTENTION, "attention")
        elif key == "loss_fn":
            job.mapped(path, name, value, LOSSES, "loss")
        elif key in ("init_device", "init_config", "no_bias", "learned_pos_emb"):
            job.ignore(name, value, "initialisation and layout details: " + NOT_PRICED)
        else:
            job.ignore(name, value, "unknown field: not an MPT option dlperf knows")


def _fsdp(job: Job, fsdp: dict, path: str, gpus: int | None) -> None:
    for key, value in fsdp.items():
        name = f"fsdp_config.{key}"
        if key == "sharding_strategy":
            if value not in SHARDING:
                raise bad(path, name, f"expected one of {', '.join(SHARDING)}, got {value!r}")
            job.parallel.update({"sharding": SHARDING[value], "tp": 1, "pp": 1})
            job.use(name, value, f"--sharding {SHARDING[value]} --tp 1 --pp 1")
        elif key == "mixed_precision":
            if value == "PURE":  # bf16 parameters and reduction, fp32 sharded masters
                job.options.update(precision="bf16", reduce_dtype="bf16")
                job.use(name, value, "--precision bf16 --reduce-dtype bf16")
            elif value in ("DEFAULT", "FULL"):
                job.options["reduce_dtype"] = "fp32"
                job.use(name, value, "--reduce-dtype fp32 (compute as --precision says)")
            else:
                raise bad(path, name, f"expected PURE, DEFAULT or FULL, got {value!r}")
        elif key == "activation_checkpointing":
            policy = "full" if value else "none"
            job.options["checkpoint"] = policy
            job.use(name, value, f"--checkpoint {policy}")
        else:
            job.ignore(name, value, "an FSDP detail dlperf does not price")


def _optimizer(job: Job, optimizer: dict) -> None:
    for key, value in optimizer.items():
        name = f"optimizer.{key}"
        if key == "name":
            note = " (Lion keeps one state, as momentum)" if "lion" in str(value) else ""
            unknown = "unknown optimizer: priced as AdamW"
            job.mapped("", name, value, OPTIMIZERS, "optimizer", note=note, unknown=unknown)
        else:
            job.ignore(name, value, f"a hyperparameter: {NOT_PRICED}")
