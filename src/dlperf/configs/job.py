"""A framework's run, as dlperf reads it from the framework's own config file.

`Job` holds what the file says in dlperf's terms: the model, the run's
options (as the public API's keywords), the batch (per GPU, accumulation,
global) and the parallel plan; and every field of the file with what it
became, or why it was ignored (`Field`), so that `dlperf explain-config`
can show the translation and nothing is dropped unseen.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..errors import DlperfError
from ..jsonable import fields_dict

# A training precision's serving one (`dlperf serve --config` of a training job).
SERVED = {"amp-bf16": "bf16", "bf16": "bf16", "amp-fp16": "fp16", "fp16": "fp16", "fp8": "fp8"}
# why a field the formats know is ignored: it tunes learning or bookkeeping
NOT_PRICED = "changes no step's time or memory"


@dataclass(frozen=True)
class Field:
    """One field of the file: its dotted name, value, and what it became."""

    name: str = field(metadata={"json": "field"})
    value: object
    became: str = ""  # e.g. "--precision amp-bf16"; empty when ignored
    ignored: str = ""  # why it changes nothing dlperf prices, or "unknown field"

    def to_dict(self) -> dict:
        """The field with what it became, or why it was ignored: never both."""
        return fields_dict(self, skip=("ignored",) if self.became else ("became",))


@dataclass
class Job:
    """A run read from a config file (module docstring)."""

    format: str  # "torchtitan", "llm-foundry", "megatron", "hf-training", "hf-config", "vllm"
    path: str
    model: str | None = None  # a dlperf model name (hf:..., hf:ORG/NAME, hf:path/config.json)
    options: dict = field(default_factory=dict)  # API keywords: precision, checkpoint, ...
    micro_batch: int | None = None  # samples per GPU per forward
    grad_accum: int | None = None
    global_batch: int | None = None
    parallel: dict = field(default_factory=dict)  # dp, tp, pp, cp, ep, sharding, schedule, ...
    serving: dict = field(default_factory=dict)  # serve's options (vLLM)
    # the GPUs its launcher starts (torchrun's --nproc_per_node x --nnodes), and per node
    gpus: int | None = None
    gpus_per_node: int | None = None
    float8: bool = False  # torchtitan's float8 converter: --precision fp8, whatever came first
    fields: list[Field] = field(default_factory=list)

    def use(self, name: str, value, became: str) -> None:
        self.fields.append(Field(name, value, became=became))

    def ignore(self, name: str, value, why: str) -> None:
        self.fields.append(Field(name, value, ignored=why))

    def mapped(self, path: str, name: str, value, table: dict, key: str, **how):
        """`value` through `table` into the options (or `how["into"]`) under
        `key`, said as `--key value` plus `how["note"]`. A value the table lacks
        is refused in one line, or with `how["unknown"]` ignored for that reason."""
        into = how.get("into", self.options)
        found = table.get(str(value))
        if found is None:
            if "unknown" in how:
                self.ignore(name, value, how["unknown"])
                return None
            raise bad(path, name, f"expected one of {', '.join(table)}, got {value!r}")
        into[key] = found
        self.use(name, value, f"--{key.replace('_', '-')} {found}{how.get('note', '')}")
        return found

    def clip_grad(self, name: str, value) -> None:
        """A maximum gradient norm: clipped (`--clip-grad`) unless it is 0 or off."""
        try:
            on = float(value) > 0
        except (TypeError, ValueError):
            on = bool(value)
        self.options["clip_grad"] = on
        self.use(name, value, "--clip-grad" if on else "no gradient clipping")

    @property
    def unknown(self) -> list[Field]:
        return [f for f in self.fields if f.ignored.startswith("unknown")]

    def cli_values(self, verb: str) -> dict:
        """The command-line values (argparse dests) this job sets for `verb`."""
        out: dict = {}
        if self.model:
            out["model"] = self.model
        if verb == "serve":
            # a training job serves in its own dtype (bf16 training serves bf16)
            served = SERVED.get(self.options.get("precision", ""))
            return out | ({"precision": served} if served else {}) | self.serving
        out |= self.options
        micro, accum = self.micro_batch, self.grad_accum
        if verb == "plan":
            out |= self.parallel
            if micro:
                out["micro_batch"] = micro
            if self.global_batch:
                out["global_batch"] = self.global_batch
        elif verb == "memory" and micro:
            out["batch"] = micro * (accum or 1)
            if accum and accum > 1:
                out["accumulate"] = accum
        elif micro:
            out["batch"] = micro
        return out

    def run_options(self, verb: str = "analyze") -> dict:
        """What this job sets for `verb` as the run configuration's keywords
        (`RunConfig.build`): `cli_values` less memory's accumulation, which
        is a verb's option (the batch is then one micro-batch)."""
        values = self.cli_values("analyze" if verb == "memory" else verb)
        if values.pop("no_chunked_prefill", False):
            values["chunked_prefill"] = False
        if values.pop("no_async_scheduling", False):
            values["async_scheduling"] = False
        if values.pop("enforce_eager", False):
            values["cuda_graphs"] = False
        return values

    def to_dict(self) -> dict:
        return fields_dict(self) | {"unknown": [f.name for f in self.unknown]}


def bad(path: str, where: str, what: str) -> DlperfError:
    """A malformed config: one line naming the file, the place and the field."""
    return DlperfError(f"{path}: {where}: {what}")


def shell_words(text: str, path: str) -> list[str]:
    """The words of a launch script, as the shell splits them: line
    continuations joined, `#` comments dropped."""
    lines = [line.split("#", 1)[0] for line in text.replace("\\\n", " ").splitlines()]
    try:
        return shlex.split(" ".join(lines))
    except ValueError as err:  # shlex's "No closing quotation" / "No escaped character"
        raise DlperfError(
            f"{path}: not a shell command line ({str(err).lower()}): close the quote "
            "or escape the character"
        ) from None


def positive(path: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise bad(path, name, f"expected a positive whole number, got {value!r}")
    return value
