"""vLLM's serve arguments (`vllm serve MODEL --flag value ...`, as a shell
script or a line of words): the engine settings `dlperf serve` prices."""

from __future__ import annotations

from .job import Job, bad, shell_words

FLAGS = {
    "--tensor-parallel-size": ("tp", int),
    "-tp": ("tp", int),
    "--pipeline-parallel-size": ("pp", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--block-size": ("block_size", int),
}
DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "auto": "bf16"}
QUANTIZATION = {"fp8": "fp8", "awq": "int4-weight", "gptq": "int4-weight"}
KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "auto": None}


def looks_like(text: str) -> bool:
    return "vllm" in text or "--max-num-seqs" in text or "--tensor-parallel-size" in text


def read(text: str, path: str, gpus: int | None = None) -> Job:
    """`gpus` is taken so that every format reads alike; the server's
    parallel sizes are its own flags."""
    job = Job("vllm", path)
    words = shell_words(text, path)
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
            # a flag's value is the next word; one that starts with "-" is a value
            # where the flag takes one and it reads as a number (--max-num-seqs -5)
            step = 2 if value is not None and (not value.startswith("-") or (
                flag in FLAGS and _number(value))) else 1  # fmt: skip
            value = value if step == 2 else True
        _flag(job, flag, value, path)
        i += step
    return job


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _flag(job: Job, flag: str, value, path: str) -> None:
    if flag in FLAGS:
        dest, kind = FLAGS[flag]
        if value is True:
            raise bad(path, flag, "needs a value")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise bad(path, flag, f"expected a {kind.__name__}, got {value!r}") from None
        if kind is int and number <= 0:
            raise bad(path, flag, f"expected a positive whole number, got {value}")
        if dest == "gpu_memory_utilization" and not 0 < number <= 1:
            raise bad(path, flag, f"expected a share of the GPU's memory in (0, 1], got {value}")
        if dest == "kv_cache_dtype":
            number = KV_DTYPES.get(str(value), str(value))
            if number is None:
                job.use(flag, value, "the model's dtype")
                return
        job.serving[dest] = number
        job.use(flag, value, f"--{dest.replace('_', '-')} {number}")
    elif flag == "--model":
        job.model = f"hf:{value}"
        job.use(flag, value, job.model)
    elif flag == "--dtype":
        found = DTYPES.get(str(value))
        if found is None:
            raise bad(path, flag, f"expected one of {', '.join(DTYPES)}, got {value!r}")
        job.serving.setdefault("precision", found)
        job.use(flag, value, f"--precision {found}")
    elif flag == "--quantization":
        unknown = "unknown field: a quantization dlperf does not price"
        job.mapped(path, flag, value, QUANTIZATION, "precision", unknown=unknown,
                   into=job.serving)  # fmt: skip
    elif flag == "--enforce-eager":
        job.serving["enforce_eager"] = True
        job.use(flag, value, "--enforce-eager")
    elif flag == "--no-enable-chunked-prefill":
        job.serving["no_chunked_prefill"] = True
        job.use(flag, value, "--no-chunked-prefill")
    elif flag == "--no-async-scheduling":
        job.serving["no_async_scheduling"] = True
        job.use(flag, value, "--no-async-scheduling")
    elif flag == "--async-scheduling":
        job.use(flag, value, "async scheduling (dlperf's default, as vLLM's)")
    elif flag in ("--host", "--port", "--served-model-name", "--api-key", "--seed",
                  "--max-model-len", "--trust-remote-code", "--disable-log-requests",
                  "--enable-prefix-caching", "--tokenizer", "--download-dir"):  # fmt: skip
        job.ignore(flag, value, "the server's setting: changes no step priced here")
    else:
        job.ignore(flag, value, "unknown field: not a vLLM argument dlperf knows")
