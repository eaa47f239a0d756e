"""Runs as the frameworks write them down: `--config FILE` and
`dlperf explain-config FILE`.

`read_config(path)` recognises the file by its content (torchtitan's job
TOML, llm-foundry's YAML, a Megatron-LM argument list, Hugging Face
`TrainingArguments` JSON or a model's `config.json`, vLLM's serve
arguments) and returns a `Job`: the model, dlperf's options, and every field
with what it became or why it was ignored. Reading a file never runs code
(TOML, YAML's safe loader, JSON, and shell words split as text).

Adding a format: write one module here with
`looks_like(doc) -> bool` and `read(doc, path, gpus) -> Job`, where `doc` is
the file as its syntax parses it (a dict for TOML and JSON, whatever the
YAML holds, the text for anything else), and add one `Format` line to `FORMATS`. Formats of one
syntax are tried in the table's order, so a narrower `looks_like` goes
first. Put an example in `examples/` and name it in tests/test_configs.py's
`EXAMPLE_OF`. A new syntax also needs its suffix in `SUFFIXES`, a parser in
`PARSERS` and, in `UNCLAIMED`, what a file of it no format claims is told.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import DlperfError
from ..hardware.spec import tomllib
from . import hf_model_config, hf_training, llm_foundry, megatron, torchtitan, vllm
from .job import Field, Job

__all__ = ["FORMATS", "Field", "Format", "Job", "parse", "read_config"]

MAX_BYTES = 1 << 20  # a config is text; anything larger is not one


class Format(NamedTuple):
    name: str  # the Job's format, as explain-config prints it
    syntax: str  # a key of PARSERS: what `looks_like` and `read` are given
    looks_like: Callable[[Any], bool]
    read: Callable[[Any, str, int | None], Job]


FORMATS = (
    Format("torchtitan", "toml", torchtitan.looks_like, torchtitan.read),
    Format("llm-foundry", "yaml", llm_foundry.looks_like, llm_foundry.read),
    Format("hf-training", "json", hf_training.looks_like, hf_training.read),
    Format("hf-config", "json", hf_model_config.looks_like, hf_model_config.read),
    Format("megatron", "text", megatron.looks_like, megatron.read),
    Format("vllm", "text", vllm.looks_like, vllm.read),
)

# the suffix names the syntax; a script or argument file (any other suffix) is text
SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}

UNCLAIMED = {
    "toml": "a TOML without [model] and [training]: not a torchtitan job",
    "yaml": "a YAML without model: and global_train_batch_size: not an llm-foundry training config",
    "json": "neither TrainingArguments (per_device_train_batch_size) nor a "
    "model's config.json (model_type)",
    "text": "not a config dlperf reads (torchtitan TOML, llm-foundry YAML, Megatron-LM "
    "arguments, TrainingArguments or config.json, vLLM arguments)",
}


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
    name = str(path)
    syntax = SUFFIXES.get(file.suffix.lower(), "text")
    doc = parse(text, syntax, name)
    for fmt in FORMATS:
        if fmt.syntax == syntax and fmt.looks_like(doc):
            return fmt.read(doc, name, gpus)
    raise DlperfError(f"{name}: {UNCLAIMED[syntax]}")


def parse(text: str, syntax: str, path: str):
    """`text` as `syntax` parses it, what the formats of that syntax read."""
    return PARSERS[syntax](text, path)


def _toml(text: str, path: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DlperfError(f"{path}: malformed TOML: {err}") from None


def _yaml(text: str, path: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        raise DlperfError(
            f"{path}: {where}: malformed YAML ({getattr(err, 'problem', err)})"
        ) from None


def _json(text: str, path: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DlperfError(f"{path}: line {err.lineno}: malformed JSON ({err.msg})") from None
    if not isinstance(doc, dict):
        raise DlperfError(f"{path}: a JSON config is an object of fields")
    return doc


def _text(text: str, path: str) -> str:
    return text


PARSERS: dict[str, Callable[[str, str], Any]] = {
    "toml": _toml,
    "yaml": _yaml,
    "json": _json,
    "text": _text,
}
