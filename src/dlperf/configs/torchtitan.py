"""torchtitan's job TOML (`torchtitan/models/*/train_configs/*.toml`).

torchtitan trains with FSDP2 (`data_parallel_shard_degree`, -1 = the GPUs
the other degrees leave), HSDP when replicas are asked too, tensor
parallelism with sequence-parallel norms, pipeline schedules, context
parallelism; parameters in `mixed_precision_param` (bf16) with no autocast,
gradients reduced in `mixed_precision_reduce` (fp32); checkpointing none,
full, or selective (per-op, or every k-th block); torch.compile per block;
the loss upcast to fp32 (its cross-entropy on fp32 logits).
"""

from __future__ import annotations

from dataclasses import replace

from .job import NOT_PRICED, Job, bad, positive

# torchtitan's model flavors, as the checkpoints they are sized as (a bundled
# config, `hf:ORG/NAME`) or a Hugging Face spec.
FLAVORS = {
    ("llama3", "8B"): "hf:meta-llama/Llama-3.1-8B",
    ("llama3", "70B"): "hf:meta-llama/Llama-3.1-70B",
    ("llama3", "405B"): "hf:meta-llama/Llama-3.1-405B",
    # dim 256, 6 layers, 16 heads, the FFN 2/3 of 4 x 256 rounded up to 256
    ("llama3", "debugmodel"): "hf:llama:hidden_size=256,num_hidden_layers=6,"
    "num_attention_heads=16,num_key_value_heads=16,intermediate_size=768,vocab_size=2000",
    ("deepseek_v3", "671B"): "hf:deepseek-ai/DeepSeek-V3",
}
PRECISION = {"bfloat16": "amp-bf16", "float16": "amp-fp16", "float32": "fp32"}
REDUCE = {"float32": "fp32", "bfloat16": "bf16"}
SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved:2"}
OPTIMIZERS = {"adamw": "adamw", "adam": "adamw", "sgd": "sgd"}
MODEL_PATHS = {"model.tokenizer_path", "model.hf_assets_path", "model.assets_path"}
# [model] converters swap the model's linear layers before training: torchtitan's
# float8 converter (older name, then newer) trains them in float8 (`--precision fp8`).
FLOAT8_CONVERTERS = {"float8", "quantize.linear.float8"}
FLOAT8_SECTIONS = ("float8", "quantize", "mx")
# Sections that describe the job's bookkeeping, not its step.
BOOKKEEPING = {
    "job",
    "profiling",
    "metrics",
    "checkpoint",
    "comm",
    "lr_scheduler",
    "validation",
    "experimental",
    "fault_tolerance",
    "memory_estimation",
}


def looks_like(doc: dict) -> bool:
    return isinstance(doc.get("model"), dict) and isinstance(doc.get("training"), dict)


def read(doc: dict, path: str, gpus: int | None) -> Job:
    job = Job("torchtitan", path)
    for section, body in doc.items():
        if not isinstance(body, dict):
            job.ignore(section, body, "unknown field: not a section")
            continue
        for key, value in _flat(body, section):
            _field(job, key, value, path)
    _parallel(job, doc.get("parallelism", {}) or {}, doc.get("training", {}), path, gpus)
    _checkpoint(job, doc.get("activation_checkpoint", {}) or {}, path)
    model_of(doc, job, path)
    if job.global_batch is None and job.micro_batch and "dp" in job.parallel:
        # -1 (the default): one micro-batch per data-parallel rank, no accumulation
        job.global_batch = job.micro_batch * job.parallel["dp"]
    if job.float8:  # whichever section came first
        job.options["precision"] = "fp8"
    else:
        _float8_unused(job)
    job.options.setdefault("precision", "amp-bf16")  # torchtitan's default param dtype
    job.options.setdefault("reduce_dtype", "fp32")
    job.options.setdefault("clip_grad", True)  # torchtitan's max_norm defaults to 1.0
    return job


def _flat(body: dict, prefix: str):
    for key, value in body.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            yield from _flat(value, name)
        else:
            yield name, value


def _field(job: Job, name: str, value, path: str) -> None:  # noqa: C901 - one table
    section = name.split(".")[0]
    if section in BOOKKEEPING:
        job.ignore(name, value, f"[{section}] is bookkeeping: {NOT_PRICED}")
        return
    if name == "model.name" or name == "model.flavor":
        return  # together, below
    if name == "model.converters":
        _converters(job, name, value, path)
        return
    if name in MODEL_PATHS:
        job.ignore(name, value, f"where weights and tokenizer live: {NOT_PRICED}")
        return
    if name == "model.print_after_conversion":
        job.ignore(name, value, f"a log option: {NOT_PRICED}")
        return
    if name in ("training.local_batch_size", "training.batch_size"):
        job.micro_batch = positive(path, name, value)
        job.use(name, value, f"micro-batch {value} per GPU")
    elif name == "training.global_batch_size":
        if value != -1:
            job.global_batch = positive(path, name, value)
            job.use(name, value, f"--global-batch {value}")
        else:
            job.use(name, value, "global batch = micro-batch x data-parallel ranks")
    elif name == "training.seq_len":
        job.options["seq_len"] = positive(path, name, value)
        job.use(name, value, f"--seq-len {value}")
    elif name == "training.mixed_precision_param":
        note = " (FSDP runs it without autocast)"
        job.mapped(path, name, value, PRECISION, "precision", note=note)
    elif name == "training.mixed_precision_reduce":
        job.mapped(path, name, value, REDUCE, "reduce_dtype")
    elif name == "training.max_norm":
        job.clip_grad(name, value)
    elif name == "training.compile":  # older torchtitan: compile under [training]
        _compile(job, name, value)
    elif name.startswith("training.") or name.startswith("parallelism."):
        _known_ignored(job, name, value)
    elif name.startswith("optimizer."):
        if name == "optimizer.name":
            unknown = "unknown optimizer: priced as AdamW"
            job.mapped(path, name, str(value).lower(), OPTIMIZERS, "optimizer", unknown=unknown)
        else:
            job.ignore(name, value, f"a hyperparameter: {NOT_PRICED}")
    elif name.startswith("activation_checkpoint."):
        return  # read together, below
    elif name == "compile.enable":
        _compile(job, name, value)
    elif name.startswith("compile."):
        job.ignore(name, value, "what torch.compile wraps: the blocks are priced compiled")
    elif section in FLOAT8_SECTIONS:
        _float8(job, name, value)
    else:
        job.ignore(name, value, "unknown field: not a torchtitan option dlperf knows")


def _known_ignored(job: Job, name: str, value) -> None:
    reasons = {
        "training.steps": "the run's length, not a step",
        "training.dataset": NOT_PRICED,
        "training.dataset_path": NOT_PRICED,
        "training.seed": NOT_PRICED,
        "training.deterministic": NOT_PRICED,
        "training.gc_freq": NOT_PRICED,
        "parallelism.enable_async_tensor_parallel": "overlap within tp: not modelled",
        "parallelism.disable_loss_parallel": "the loss is vocabulary-parallel under tp",
        "parallelism.pipeline_parallel_microbatch_size": "read with the pipeline degree",
        "parallelism.fsdp_reshard_after_forward": "FSDP reshards after forward (its default)",
    }
    degrees = {
        "parallelism.data_parallel_replicate_degree",
        "parallelism.data_parallel_shard_degree",
        "parallelism.tensor_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "parallelism.context_parallel_degree",
        "parallelism.expert_parallel_degree",
        "parallelism.pipeline_parallel_schedule",
        "training.data_parallel_replicate_degree",
        "training.data_parallel_shard_degree",
        "training.tensor_parallel_degree",
    }
    if name in degrees:
        return  # read together in _parallel
    if name in reasons:
        job.ignore(name, value, reasons[name])
    else:
        job.ignore(name, value, "unknown field: not a torchtitan option dlperf knows")


def _checkpoint(job: Job, ac: dict, path: str) -> None:
    """torchtitan's activation_checkpoint: none, full, or selective per op
    (`selective_ac_option = "op"`) or every k-th block (`"2"`)."""
    if not ac:
        return
    name, mode = "activation_checkpoint.mode", str(ac.get("mode", "none")).lower()
    option = str(ac.get("selective_ac_option", "op"))
    if mode in ("none", "full"):
        policy = mode
    elif mode == "selective" and (option == "op" or option.isdigit()):
        policy = "selective-op" if option == "op" else f"every:{option}"
    elif mode == "selective":
        raise bad(path, "activation_checkpoint.selective_ac_option", f"got {option!r}")
    else:
        raise bad(path, name, f"expected none, selective or full, got {ac.get('mode')!r}")
    job.options["checkpoint"] = policy
    job.use("activation_checkpoint", ac, f"--checkpoint {policy}")
    for key, value in ac.items():
        if key not in ("mode", "selective_ac_option"):
            job.ignore(f"activation_checkpoint.{key}", value, "a detail of the policy above")


def _compile(job: Job, name: str, value) -> None:
    if value:
        job.options["compile"] = True
        job.use(name, value, "--compile")
    else:
        job.use(name, value, "eager (no --compile)")


def _converters(job: Job, name: str, value, path: str) -> None:
    """`[model] converters`: float8 trains the linear layers in float8 (its
    `[float8]` section tunes how); another converter (MX formats) is refused,
    as dlperf prices none."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad(path, name, f"expected a list of converter names, got {value!r}")
    other = [n for n in names if n not in FLOAT8_CONVERTERS]
    if other:
        raise bad(path, name, f"dlperf prices no {other[0]!r} converter (only float8): "
                  "remove it, or price the job without it")  # fmt: skip
    if names:
        job.float8 = True
        job.use(name, value, "--precision fp8 (torchtitan's float8 linear layers)")
    else:
        job.use(name, value, "no converter: the layers as built")


def _float8(job: Job, name: str, value) -> None:
    if name.endswith("enable_float8_linear") or name == "quantize.linear.float8.enable":
        if value:
            job.float8 = True
            job.use(name, value, "--precision fp8 (float8 linear layers)")
        else:
            job.use(name, value, "no float8 linear layers")
        return
    job.ignore(name, value, "a float8 detail dlperf's fp8 policy fixes")


def _float8_unused(job: Job) -> None:
    """Without the float8 converter torchtitan builds no float8 layer: its
    section's settings change nothing, and are listed as such."""
    unused = "torchtitan applies it only with [model] converters = [\"float8\"]: priced in bf16"
    job.fields[:] = [
        replace(f, ignored=unused) if f.name.split(".")[0] in FLOAT8_SECTIONS and f.ignored else f
        for f in job.fields
    ]


def _parallel(job: Job, par: dict, training: dict, path: str, gpus: int | None) -> None:
    def degree(key: str, default: int) -> int:
        value = par.get(key, training.get(key, default))
        if value == -1 and key == "data_parallel_shard_degree":
            return -1
        return positive(path, f"parallelism.{key}", value)

    replicate = degree("data_parallel_replicate_degree", 1)
    shard = degree("data_parallel_shard_degree", -1)
    tp = degree("tensor_parallel_degree", 1)
    pp = degree("pipeline_parallel_degree", 1)
    cp = degree("context_parallel_degree", 1)
    model_parallel = tp * pp * cp
    if shard == -1 and gpus:
        if gpus % (model_parallel * replicate):
            raise bad(path, "parallelism", f"{gpus} GPUs do not divide into these degrees")
        shard = gpus // (model_parallel * replicate)
    plan: dict = {"tp": tp, "pp": pp, "cp": cp}
    if shard != -1:
        plan["dp"] = shard * replicate
    if shard == 1 and replicate > 1:
        plan["sharding"] = "none"
    else:
        plan["sharding"] = "hsdp" if replicate > 1 else "fsdp"
    if tp > 1:
        plan["sequence_parallel"] = True  # torchtitan's TP plan shards the norms' sequence
    schedule = par.get("pipeline_parallel_schedule")
    if pp > 1 and schedule:
        key = str(schedule).lower()
        if key not in SCHEDULES:
            raise bad(path, "parallelism.pipeline_parallel_schedule", f"unknown {schedule!r}")
        plan["schedule"] = SCHEDULES[key]
    job.parallel = plan
    said = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in plan.items())
    job.use("parallelism", {k: v for k, v in par.items() if "degree" in k}, said)


def model_of(doc: dict, job: Job, path: str) -> None:
    model = doc.get("model", {})
    name, flavor = model.get("name"), model.get("flavor")
    if name is None or flavor is None:
        raise bad(path, "[model]", "needs name and flavor (as torchtitan's train configs give)")
    found = FLAVORS.get((str(name), str(flavor)))
    if found is None:
        known = ", ".join(f"{n}/{f}" for n, f in FLAVORS)
        raise bad(path, "model", f"no dlperf model for {name}/{flavor}; known: {known}")
    job.model = found
    job.use("model.name+flavor", f"{name} {flavor}", found)
