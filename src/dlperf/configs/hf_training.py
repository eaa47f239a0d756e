"""Hugging Face `TrainingArguments`, as the JSON `Trainer` users save them:
the micro-batch, accumulation, precision, checkpointing, optimizer,
compilation and FSDP; learning rates and bookkeeping change no step."""

from __future__ import annotations

from .job import NOT_PRICED, Job, bad, positive

OPTIMIZERS = {
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
IGNORED = frozenset(_NOT_PRICED_TEXT.split())


def looks_like(doc: dict) -> bool:
    return "per_device_train_batch_size" in doc or "gradient_accumulation_steps" in doc


def read(doc: dict, path: str, gpus: int | None) -> Job:
    job = Job("hf-training", path)
    if doc.get("fp16") is True and doc.get("bf16") is True:  # as TrainingArguments refuses it
        raise bad(path, "fp16 and bf16", "both true: at most one of them can be (Hugging Face "
                  "refuses both too); set the other to false")  # fmt: skip
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
            job.mapped(path, key, value, OPTIMIZERS, "optimizer", unknown=unknown)
        elif key == "max_grad_norm":
            job.clip_grad(key, value)
        elif key == "torch_compile":
            job.options["compile"] = bool(value)
            job.use(key, value, "--compile" if value else "eager")
        elif key == "fsdp":
            sharding = "fsdp" if "full_shard" in str(value) else "zero2" if value else "none"
            job.parallel.update(sharding=sharding, tp=1, pp=1)
            job.use(key, value, f"--sharding {sharding}")
        elif key in IGNORED:
            job.ignore(key, value, NOT_PRICED)
        else:
            job.ignore(key, value, "unknown field: not a TrainingArguments field dlperf knows")
    job.options.setdefault("clip_grad", True)  # the Trainer's max_grad_norm defaults to 1.0
    if job.micro_batch and gpus:
        job.global_batch = job.micro_batch * (job.grad_accum or 1) * gpus
        job.parallel.setdefault("dp", gpus)
    return job
