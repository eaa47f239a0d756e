"""Runs as the frameworks write them down: `--config FILE` and
`dlperf explain-config FILE`.

`read_config(path)` recognises the file by its content (torchtitan's job
TOML, llm-foundry's YAML, a Megatron-LM argument list, Hugging Face
`TrainingArguments` JSON or a model's `config.json`, vLLM's serve
arguments) and returns a `Job`: the model, dlperf's options, and every field
with what it became or why it was ignored. Reading a file never runs code
(TOML, YAML's safe loader, JSON, and shell words split as text).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DlperfError
from ..hardware.spec import tomllib
from . import hf_model_config, hf_training, llm_foundry, megatron, torchtitan, vllm
from .job import Field, Job

__all__ = ["Field", "Job", "read_config"]

MAX_BYTES = 1 << 20  # a config is text; anything larger is not one


def read_config(path: str | Path, gpus: int | None = None) -> Job:
    """The run `path` describes; `gpus` resolves degrees it leaves to the
    GPU count (torchtitan's -1)."""
    file = Path(path)
    if not file.is_file():
        raise DlperfError(f"no config file {str(path)!r}: give the path of a TOML, YAML, "
                          "JSON or argument-list file")  # fmt: skip
    if file.stat().st_size > MAX_BYTES:
        raise DlperfError(f"{path}: larger than 1 MiB: not a config file")
    try:
        text = file.read_text()
    except UnicodeDecodeError:
        raise DlperfError(f"{path}: not a text file") from None
    suffix = file.suffix.lower()
    name = str(path)
    if suffix == ".toml":
        return _toml(text, name, gpus)
    if suffix in (".yaml", ".yml"):
        return _yaml(text, name, gpus)
    if suffix == ".json":
        return _json(text, name, gpus)
    if megatron.looks_like(text):
        return megatron.read(text, name, gpus)
    if vllm.looks_like(text):
        return vllm.read(text, name)
    raise DlperfError(
        f"{path}: not a config dlperf reads (torchtitan TOML, llm-foundry YAML, Megatron-LM "
        "arguments, TrainingArguments or config.json, vLLM arguments)"
    )


def _toml(text: str, path: str, gpus: int | None) -> Job:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DlperfError(f"{path}: malformed TOML: {err}") from None
    if not torchtitan.looks_like(doc):
        raise DlperfError(f"{path}: a TOML without [model] and [training]: not a torchtitan job")
    return torchtitan.read(doc, path, gpus)


def _yaml(text: str, path: str, gpus: int | None) -> Job:
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise DlperfError(
            f"{path}: {where}: malformed YAML ({getattr(err, 'problem', err)})"
        ) from None
    if not isinstance(doc, dict) or not llm_foundry.looks_like(doc):
        raise DlperfError(f"{path}: a YAML without model: and global_train_batch_size: not an "
                          "llm-foundry training config")  # fmt: skip
    return llm_foundry.read(doc, path, gpus)


def _json(text: str, path: str, gpus: int | None) -> Job:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DlperfError(f"{path}: line {err.lineno}: malformed JSON ({err.msg})") from None
    if not isinstance(doc, dict):
        raise DlperfError(f"{path}: a JSON config is an object of fields")
    if hf_training.looks_like(doc):
        return hf_training.read(doc, path, gpus)
    if hf_model_config.looks_like(doc):
        return hf_model_config.read(doc, path)
    raise DlperfError(f"{path}: neither TrainingArguments (per_device_train_batch_size) nor a "
                      "model's config.json (model_type)")  # fmt: skip
