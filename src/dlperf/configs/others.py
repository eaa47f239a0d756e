"""The smaller formats: Hugging Face `TrainingArguments` as JSON, a model's
`config.json`, and vLLM's serve arguments."""

from __future__ import annotations

import shlex

from .job import Job, bad, positive

NOT_PRICED = "changes no step's time or memory"

# -- Hugging Face TrainingArguments (JSON) ---------------------------------------

HF_OPTIMIZERS = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw-hf",
    "adafactor": "adafactor",
    "adamw_bnb_8bit": "adam8bit",
    "adamw_8bit": "adam8bit",
    "sgd": "sgd",
}


_NOT_PRICED_TEXT = """learning_rate weight_decay num_train_epochs max_steps seed output_dir
    logging_steps save_steps warmup_steps warmup_ratio report_to evaluation_strategy
    eval_strategy lr_scheduler_type adam_beta1 adam_beta2 adam_epsilon
    dataloader_num_workers log_level per_device_eval_batch_size save_strategy logging_dir
    run_name"""
HF_NOT_PRICED = frozenset(_NOT_PRICED_TEXT.split())


def looks_like_training_arguments(doc: dict) -> bool:
    return "per_device_train_batch_size" in doc or "gradient_accumulation_steps" in doc


def read_training_arguments(doc: dict, path: str, gpus: int | None) -> Job:
    job = Job("hf-training", path)
    for key, value in doc.items():
        if key == "per_device_train_batch_size":
            job.micro_batch = positive(path, key, value)
            job.use(key, value, f"micro-batch {value} per GPU")
        elif key == "gradient_accumulation_steps":
            job.grad_accum = positive(path, key, value)
            job.use(key, value, f"{value} micro-batches a step")
        elif key in ("bf16", "fp16"):
            if value:
                job.options["precision"] = f"amp-{key}"
                job.use(key, value, f"--precision amp-{key}")
            else:
                job.ignore(key, value, "off")
        elif key == "tf32":
            if value and "precision" not in job.options:
                job.options["precision"] = "tf32"
            job.use(key, value, "--precision tf32" if value else "fp32 math")
        elif key == "gradient_checkpointing":
            job.options["checkpoint"] = "full" if value else "none"
            job.use(key, value, f"--checkpoint {job.options['checkpoint']}")
        elif key == "optim":
            unknown = "unknown optimizer: priced as AdamW"
            job.mapped(path, key, value, HF_OPTIMIZERS, "optimizer", unknown=unknown)
        elif key == "max_grad_norm":
            job.clip_grad(key, value)
        elif key == "torch_compile":
            job.options["compile"] = bool(value)
            job.use(key, value, "--compile" if value else "eager")
        elif key == "fsdp":
            sharding = "fsdp" if "full_shard" in str(value) else "zero2" if value else "none"
            job.parallel.update(sharding=sharding, tp=1, pp=1)
            job.use(key, value, f"--sharding {sharding}")
        elif key in HF_NOT_PRICED:
            job.ignore(key, value, NOT_PRICED)
        else:
            job.ignore(key, value, "unknown field: not a TrainingArguments field dlperf knows")
    job.options.setdefault("clip_grad", True)  # the Trainer's max_grad_norm defaults to 1.0
    if job.micro_batch and gpus:
        job.global_batch = job.micro_batch * (job.grad_accum or 1) * gpus
        job.parallel.setdefault("dp", gpus)
    return job


# -- a model's config.json -----------------------------------------------------


def looks_like_model_config(doc: dict) -> bool:
    return "model_type" in doc


def read_model_config(doc: dict, path: str) -> Job:
    job = Job("hf-config", path, model=f"hf:{path}")
    job.use("model_type", doc.get("model_type"), f"the model: hf:{path}")
    for key, value in doc.items():
        if key != "model_type":
            job.use(key, value, "a field of the model's config")
    return job


# -- vLLM serve arguments ------------------------------------------------------

VLLM_FLAGS = {
    "--tensor-parallel-size": ("tp", int),
    "-tp": ("tp", int),
    "--pipeline-parallel-size": ("pp", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--block-size": ("block_size", int),
}
VLLM_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "auto": "bf16"}
VLLM_QUANTIZATION = {"fp8": "fp8", "awq": "int4-weight", "gptq": "int4-weight"}
VLLM_KV = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "auto": None}


def looks_like_vllm(text: str) -> bool:
    return "vllm" in text or "--max-num-seqs" in text or "--tensor-parallel-size" in text


def read_vllm(text: str, path: str) -> Job:
    job = Job("vllm", path)
    joined = text.replace("\\\n", " ")  # a shell line continuation
    words = shlex.split(" ".join(line.split("#", 1)[0] for line in joined.splitlines()))
    if "serve" in words:  # `vllm serve MODEL ...`
        at = words.index("serve")
        if at + 1 < len(words) and not words[at + 1].startswith("-"):
            hub = words[at + 1]
            job.model = f"hf:{hub}"
            job.use("model", hub, f"hf:{hub}")
        words = words[at + 2 :]
    i = 0
    while i < len(words):
        flag, value = words[i], words[i + 1] if i + 1 < len(words) else None
        if "=" in flag:
            flag, value = flag.split("=", 1)
            step = 1
        else:
            step = 2 if value is not None and not value.startswith("-") else 1
            value = value if step == 2 else True
        _vllm_flag(job, flag, value, path)
        i += step
    return job


def _vllm_flag(job: Job, flag: str, value, path: str) -> None:
    if flag in VLLM_FLAGS:
        dest, kind = VLLM_FLAGS[flag]
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise bad(path, flag, f"expected a {kind.__name__}, got {value!r}") from None
        if dest == "kv_cache_dtype":
            number = VLLM_KV.get(str(value), str(value))
            if number is None:
                job.use(flag, value, "the model's dtype")
                return
        job.serving[dest] = number
        job.use(flag, value, f"--{dest.replace('_', '-')} {number}")
    elif flag == "--model":
        job.model = f"hf:{value}"
        job.use(flag, value, job.model)
    elif flag == "--dtype":
        found = VLLM_DTYPES.get(str(value))
        if found is None:
            raise bad(path, flag, f"expected one of {', '.join(VLLM_DTYPES)}, got {value!r}")
        job.serving.setdefault("precision", found)
        job.use(flag, value, f"--precision {found}")
    elif flag == "--quantization":
        unknown = "unknown field: a quantization dlperf does not price"
        job.mapped(path, flag, value, VLLM_QUANTIZATION, "precision", unknown=unknown,
                   into=job.serving)  # fmt: skip
    elif flag == "--enforce-eager":
        job.serving["enforce_eager"] = True
        job.use(flag, value, "--enforce-eager")
    elif flag == "--no-enable-chunked-prefill":
        job.serving["no_chunked_prefill"] = True
        job.use(flag, value, "--no-chunked-prefill")
    elif flag in ("--host", "--port", "--served-model-name", "--api-key", "--seed",
                  "--max-model-len", "--trust-remote-code", "--disable-log-requests",
                  "--enable-prefix-caching", "--tokenizer", "--download-dir"):  # fmt: skip
        job.ignore(flag, value, "the server's setting: changes no step priced here")
    else:
        job.ignore(flag, value, "unknown field: not a vLLM argument dlperf knows")
