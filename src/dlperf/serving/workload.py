"""The requests a serving benchmark sends: prompt and output lengths from a
dataset, arrival times from a rate, as vLLM's and SGLang's `benchmark_serving`
draw them.

Datasets (`--dataset`):

- `random:in=I,out=O[,range=F]`: vLLM's random dataset; each length is drawn
  uniformly from [L (1 - F), L (1 + F)] (F = 0, the default: every request
  has exactly I and O tokens);
- `FILE.jsonl`: one request per line, `{"input_len": I, "output_len": O}`
  (also `prompt_len`/`prompt_tokens` and `output_tokens`), optionally
  `"arrival_s": T` (seconds from the start: a trace of timestamps);
- `FILE.json`: a length histogram, `{"source": "...", "input_len": {"bins":
  [edges...], "counts": [...]}, "output_len": {...}}`, lengths drawn per
  bin and uniformly inside it (input and output drawn independently);
- `shared-prefix:system=S,question=Q,output=O,groups=G,users=U[,extra=E]`:
  inference-perf's shared-prefix data: G system prompts of S tokens, each
  shared by U users; a request is a user's system prompt, a question of Q
  tokens and E more (a chat template's), and generates O tokens. The system
  prompt is the request's shared prefix: once one request of its group has
  computed it, the engine's prefix cache holds its whole blocks;
- `sharegpt`: ShareGPT's lengths need the dataset and a tokenizer, which
  dlperf does not ship; the error says how to give them as a JSONL file.

Arrivals: a Poisson process at `request_rate` requests per second
(exponential gaps, `benchmark_serving`'s default), all at once when the rate
is infinite, or the timestamps a JSONL file gives; or stages of a constant
load (`--stages RATExSECONDS,...`, inference-perf's `constant` load type):
each stage sends int(rate x seconds) requests, exponential gaps rescaled so
that they fill the stage. Reading a file never runs
code: JSON only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DlperfError

DEFAULT_PROMPTS = 1000  # requests a simulation sends unless told (vLLM's benchmark's)


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order: arrival times (s), prompt and output tokens;
    for a shared-prefix dataset each one's group and the prompt tokens its
    group shares; for a staged load each one's stage."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    dataset: str
    group: np.ndarray | None = None
    prefix_len: np.ndarray | None = None
    stage: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


def parse_stages(text: str) -> list[tuple[float, float]]:
    """`--stages 8x600,20x600`: (requests per second, seconds) per stage."""
    stages = []
    for part in text.split(","):
        rate, x, seconds = part.strip().partition("x")
        try:
            found = (float(rate), float(seconds))
        except ValueError:
            found = None
        if not x or found is None or not all(0 < v < math.inf for v in found):
            raise DlperfError(
                f"--stages {text!r}: expected RATExSECONDS,... like 8x600,20x600 (positive "
                f"numbers), not {part.strip()!r}"
            )
        if int(found[0] * found[1]) < 1:
            raise DlperfError(f"--stages {text!r}: {part.strip()} sends no request")
        stages.append(found)
    return stages


def stage_counts(stages: list[tuple[float, float]]) -> list[int]:
    """Requests each stage sends: int(rate x seconds), as inference-perf."""
    return [int(rate * seconds) for rate, seconds in stages]


@dataclass(frozen=True)
class Requests:
    """A dataset's requests, drawn once: their lengths (and any arrival times
    the file gives), and the random stream's state from which their arrivals
    at a rate are drawn next, so every rate sees the same requests."""

    dataset: str
    input_len: np.ndarray
    output_len: np.ndarray
    given_arrival_s: np.ndarray | None
    rng_state: dict
    group: np.ndarray | None = None
    prefix_len: np.ndarray | None = None

    def arriving(self, request_rate: float = math.inf) -> Workload:
        """The requests arriving at `request_rate` per second, in arrival order."""
        if not request_rate > 0:
            raise DlperfError(f"--request-rate must be positive (or inf), not {request_rate!r}")
        n = len(self.input_len)
        if self.given_arrival_s is not None:
            arrivals = self.given_arrival_s
        elif math.isinf(request_rate):
            arrivals = np.zeros(n)
        else:
            rng = np.random.default_rng()
            rng.bit_generator.state = self.rng_state
            arrivals = np.cumsum(rng.exponential(1.0 / request_rate, n))
            arrivals -= arrivals[0]  # the first request starts the run
        return self._in_order(arrivals)

    def subset(self, most: int) -> Requests:
        """The first `most` requests, without the file's arrival times (their
        arrivals are drawn at whatever rate is asked)."""

        def first(values):
            return None if values is None else values[:most]

        return Requests(self.dataset, self.input_len[:most], self.output_len[:most], None,
                        self.rng_state, first(self.group), first(self.prefix_len))  # fmt: skip

    def staged(self, stages: list[tuple[float, float]]) -> Workload:
        """The requests sent in `stages` (module docstring), in arrival order."""
        counts = stage_counts(stages)
        if sum(counts) != len(self.input_len):
            raise DlperfError(f"the stages send {sum(counts)} requests, not {len(self.input_len)}")
        rng = np.random.default_rng()
        rng.bit_generator.state = self.rng_state
        arrivals, stage, start = [], [], 0.0
        for i, ((rate, seconds), n) in enumerate(zip(stages, counts, strict=True)):
            gaps = rng.exponential(1.0 / rate, n)
            arrivals.append(start + np.cumsum(gaps) * (seconds / gaps.sum()))
            stage.append(np.full(n, i))
            start += seconds
        return self._in_order(np.concatenate(arrivals), np.concatenate(stage))

    def _in_order(self, arrivals: np.ndarray, stage: np.ndarray | None = None) -> Workload:
        order = np.argsort(arrivals, kind="stable")

        def sorted_(values):
            return None if values is None else values[order]

        return Workload(
            arrivals[order], self.input_len[order], self.output_len[order], self.dataset,
            sorted_(self.group), sorted_(self.prefix_len), sorted_(stage),
        )  # fmt: skip


def requests(dataset: str, num_prompts: int | None = None, seed: int = 0) -> Requests:
    """`num_prompts` requests of `dataset`, their lengths drawn with `seed`;
    None: every request of a file of timestamps, else DEFAULT_PROMPTS."""
    if num_prompts is not None and (
        isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts <= 0
    ):
        raise DlperfError(f"--num-prompts must be a positive whole number, not {num_prompts!r}")
    rng = np.random.default_rng(seed)
    if dataset.startswith("shared-prefix:"):
        n = num_prompts or DEFAULT_PROMPTS
        inputs, outputs, group, prefix = _shared_prefix(dataset, n, rng)
        return Requests(dataset, inputs, outputs, None, rng.bit_generator.state, group, prefix)
    inputs, outputs, given = _lengths(dataset, num_prompts, rng)
    return Requests(dataset, inputs, outputs, given, rng.bit_generator.state)


def workload(
    dataset: str,
    num_prompts: int | None = None,
    request_rate: float = math.inf,
    seed: int = 0,
) -> Workload:
    """`num_prompts` requests of `dataset` arriving at `request_rate` per second."""
    return requests(dataset, num_prompts, seed).arriving(request_rate)


def _lengths(dataset: str, n: int | None, rng):
    """(input lengths, output lengths, arrival times or None) of n requests
    (None: a JSONL file's timed requests, else DEFAULT_PROMPTS)."""
    path = Path(dataset)
    if path.suffix == ".jsonl":
        return _jsonl(path, n)
    n = n or DEFAULT_PROMPTS
    if dataset.startswith("random:"):
        i, o, spread = _random_spec(dataset)
        return _uniform(i, spread, n, rng), _uniform(o, spread, n, rng), None
    if dataset == "sharegpt":
        raise DlperfError(
            "dlperf ships no ShareGPT lengths (they need the dataset and your model's "
            'tokenizer); write them as FILE.jsonl, one {"input_len": I, "output_len": O} '
            "per line, and pass --dataset FILE.jsonl"
        )
    if path.suffix == ".json":
        return _histogram(path, n, rng)
    raise DlperfError(
        f"unknown --dataset {dataset!r}; give random:in=I,out=O[,range=F], "
        "shared-prefix:system=S,question=Q,output=O,groups=G,users=U, FILE.jsonl (lengths "
        "per request) or FILE.json (a length histogram)"
    )


SHARED_PREFIX_KEYS = ("system", "question", "output", "groups", "users", "extra")


def _shared_prefix(text: str, n: int, rng):
    """(input lengths, output lengths, groups, shared prefix lengths) of n
    requests of inference-perf's shared-prefix data: each from a user drawn
    uniformly among groups x users, its group's system prompt first."""
    usage = (f"--dataset {text!r}: expected shared-prefix:system=S,question=Q,output=O,"
             "groups=G,users=U[,extra=E] (whole numbers; extra may be 0)")  # fmt: skip
    fields = {}
    for part in text.removeprefix("shared-prefix:").split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in SHARED_PREFIX_KEYS or key in fields:
            raise DlperfError(f"{usage}, not {part!r}")
        try:
            fields[key] = int(value)
        except ValueError:
            raise DlperfError(f"{usage}, not {part!r}") from None
    fields.setdefault("extra", 0)
    if set(fields) != set(SHARED_PREFIX_KEYS) or fields["extra"] < 0 or any(
        fields[k] <= 0 for k in SHARED_PREFIX_KEYS if k != "extra"
    ):
        raise DlperfError(usage)
    users = rng.integers(0, fields["groups"] * fields["users"], n)
    prompt = fields["system"] + fields["question"] + fields["extra"]
    return (
        np.full(n, prompt),
        np.full(n, fields["output"]),
        users // fields["users"],
        np.full(n, fields["system"]),
    )


def _random_spec(text: str) -> tuple[int, int, float]:
    fields = {}
    for part in text.removeprefix("random:").split(","):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in ("in", "out", "range"):
            raise DlperfError(
                f"--dataset {text!r}: expected random:in=I,out=O[,range=F], not {part!r}"
            )
        fields[key.strip()] = value.strip()
    try:
        i, o = int(fields["in"]), int(fields["out"])
        spread = float(fields.get("range", 0))
    except (KeyError, ValueError):
        raise DlperfError(
            f"--dataset {text!r}: give whole numbers in= and out= (and range= a fraction)"
        ) from None
    if i <= 0 or o <= 0 or not 0 <= spread < 1:
        raise DlperfError(f"--dataset {text!r}: in and out must be positive, range in [0, 1)")
    return i, o, spread


def _uniform(mean: int, spread: float, n: int, rng) -> np.ndarray:
    low, high = max(1, int(mean * (1 - spread))), int(mean * (1 + spread))
    return rng.integers(low, high + 1, n)


def _jsonl(path: Path, n: int | None):
    """A file of timestamps (arrival_s on every line) sends its requests, the
    first n of them where n is given; lengths alone are cycled to n."""
    rows, numbers = [], []
    try:
        with path.open() as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    rows.append(_request(_json_line(line, path, number), path, number))
                    numbers.append(number)
    except (OSError, UnicodeDecodeError) as err:
        raise DlperfError(f"cannot read --dataset {path}: {err}") from None
    if not rows:
        raise DlperfError(f"--dataset {path} holds no requests")
    untimed = [number for number, r in zip(numbers, rows, strict=True) if r[2] is None]
    if untimed and len(untimed) < len(rows):
        raise DlperfError(
            f"--dataset {path}: line {untimed[0]} has no arrival_s while others have one; "
            "give arrival_s on every line (a trace of timestamps) or on none (arrivals "
            "drawn at --request-rate)"
        )
    if not untimed:
        if n is not None and n > len(rows):
            raise DlperfError(
                f"--num-prompts {n} asks for more requests than the {len(rows)} with "
                f"arrival_s in --dataset {path}: give at most {len(rows)}, or leave "
                "--num-prompts out to send them all"
            )
        n = n or len(rows)
    n = n or DEFAULT_PROMPTS
    picked = [rows[k % len(rows)] for k in range(n)]  # cycled, as the file orders them
    inputs = np.array([r[0] for r in picked])
    outputs = np.array([r[1] for r in picked])
    if untimed:
        return inputs, outputs, None
    return inputs, outputs, np.array([r[2] for r in picked], dtype=float)


def _json_line(line: str, path: Path, number: int):
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise DlperfError(f"--dataset {path}, line {number}: not JSON ({err.msg})") from None


_INPUT_KEYS = ("input_len", "prompt_len", "prompt_tokens")
_OUTPUT_KEYS = ("output_len", "output_tokens")


def _request(doc, path: Path, number: int):
    where = f"--dataset {path}, line {number}"
    if not isinstance(doc, dict):
        raise DlperfError(f"{where}: expected an object with input_len and output_len")
    found = [next((doc[k] for k in keys if k in doc), None) for keys in (_INPUT_KEYS, _OUTPUT_KEYS)]
    if not all(isinstance(v, int) and v > 0 for v in found):
        raise DlperfError(f"{where}: input_len and output_len must be positive whole numbers")
    arrival = doc.get("arrival_s")
    if arrival is not None and not (isinstance(arrival, (int, float)) and arrival >= 0):
        raise DlperfError(f"{where}: arrival_s must be a number of seconds >= 0")
    return found[0], found[1], arrival


def _histogram(path: Path, n: int, rng):
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise DlperfError(f"cannot read --dataset {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise DlperfError(f"--dataset {path} is not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise DlperfError(f"--dataset {path}: expected an object with input_len and output_len")
    return (
        _draw(doc.get("input_len"), path, "input_len", n, rng),
        _draw(doc.get("output_len"), path, "output_len", n, rng),
        None,
    )


def _draw(hist, path: Path, name: str, n: int, rng) -> np.ndarray:
    bad = DlperfError(
        f'--dataset {path}: {name} must be {{"bins": [n+1 increasing edges], "counts": '
        "[n counts >= 0, not all 0]}"
    )
    if not isinstance(hist, dict):
        raise bad
    try:
        edges = np.asarray(hist["bins"], dtype=float)
        counts = np.asarray(hist["counts"], dtype=float)
    except (KeyError, TypeError, ValueError):
        raise bad from None
    if (
        edges.ndim != 1
        or counts.shape != (len(edges) - 1,)
        or len(counts) == 0
        or np.any(np.diff(edges) <= 0)
        or edges[0] < 1
        or np.any(counts < 0)
        or counts.sum() <= 0
    ):
        raise bad
    bins = rng.choice(len(counts), size=n, p=counts / counts.sum())
    return np.floor(rng.uniform(edges[bins], edges[bins + 1])).astype(int)
