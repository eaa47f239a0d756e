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
from collections.abc import Callable
from dataclasses import dataclass, replace
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


# Requests drawn and simulated at a time: a run's memory is bounded by a chunk (and
# the requests waiting in the engine), not by how many it sends.
CHUNK = 2**16


@dataclass(frozen=True)
class Requests:
    """A dataset's `count` requests, drawn chunk by chunk (`CHUNK`) whenever
    they are sent, the same each time: their lengths from `seed`, their
    arrivals at a rate from the random stream's state after every length
    (`arrival_state`), so every rate sees the same requests. `longest_*`:
    the longest prompt, output and request of all of them. A file of
    timestamps holds its requests (the file does), sorted by arrival."""

    dataset: str
    count: int
    seed: int
    draw: Callable  # (start, n, rng) -> (inputs, outputs, groups or None, prefixes or None)
    drawn: int  # requests whose chunks the draws follow (a subset sends the first `count`)
    arrival_state: dict
    longest_input: int
    longest_output: int
    longest: int
    given_arrival_s: np.ndarray | None = None

    def lengths(self):
        """The requests' lengths, chunk by chunk: (inputs, outputs, groups, prefixes)."""
        yield from _chunks(self.draw, self.drawn, self.count, np.random.default_rng(self.seed))

    def arriving(self, request_rate: float = math.inf) -> Stream:
        """The requests arriving at `request_rate` per second, in arrival order."""
        if not request_rate > 0:
            raise DlperfError(f"--request-rate must be positive (or inf), not {request_rate!r}")
        if self.given_arrival_s is not None:
            arrivals = _Given(self.given_arrival_s)
        elif math.isinf(request_rate):
            arrivals = _AtOnce()
        else:
            arrivals = _Poisson(request_rate, self._arrival_rng())
        return Stream(self, arrivals)

    def staged(self, stages: list[tuple[float, float]]) -> Stream:
        """The requests sent in `stages` (module docstring), in arrival order."""
        counts = stage_counts(stages)
        if sum(counts) != self.count:
            raise DlperfError(f"the stages send {sum(counts)} requests, not {self.count}")
        return Stream(self, _Staged(stages, counts, self._arrival_rng()))

    def subset(self, most: int) -> Requests:
        """The first `most` requests, without the file's arrival times (their
        arrivals are drawn at whatever rate is asked)."""
        return replace(self, count=min(most, self.count), given_arrival_s=None)

    def _arrival_rng(self):
        rng = np.random.default_rng()
        rng.bit_generator.state = self.arrival_state
        return rng


@dataclass(frozen=True)
class Stream:
    """`requests` arriving as `arrivals` draws them: `Workload` chunks in
    arrival order, drawn as the simulation consumes them."""

    requests: Requests
    arrivals: object  # a fresh `_Poisson`, `_AtOnce`, `_Given` or `_Staged`

    def __len__(self) -> int:
        return self.requests.count

    @property
    def longest(self) -> int:
        return self.requests.longest

    def __iter__(self):
        r = self.requests
        for inputs, outputs, group, prefix in r.lengths():
            arrival_s, stage = self.arrivals.take(len(inputs))
            yield Workload(arrival_s, inputs, outputs, r.dataset, group, prefix, stage)


class _AtOnce:
    def take(self, n: int):
        return np.zeros(n), None


class _Given:
    """A file's timestamps, sorted."""

    def __init__(self, times: np.ndarray):
        self.times, self.sent = times, 0

    def take(self, n: int):
        self.sent += n
        return self.times[self.sent - n : self.sent], None


class _Poisson:
    """Exponential gaps at `rate`; the first request starts the run."""

    def __init__(self, rate: float, rng):
        self.rate, self.rng = rate, rng
        self.first, self.last = None, 0.0

    def take(self, n: int):
        times = self.last + np.cumsum(self.rng.exponential(1.0 / self.rate, n))
        if self.first is None:
            self.first = times[0]
        self.last = times[-1]
        return times - self.first, None


class _Staged:
    """Each stage's exponential gaps, rescaled to fill it: their sum is drawn
    once ahead (the stream's state saved and restored), so a stage of any
    size is sent chunk by chunk."""

    def __init__(self, stages, counts, rng):
        self.stages, self.counts, self.rng = stages, counts, rng
        self.stage, self.left, self.start = -1, 0, 0.0
        self.scale = self.drawn = 0.0

    def _next_stage(self) -> None:
        if self.stage >= 0:
            self.start += self.stages[self.stage][1]
        self.stage += 1
        rate, seconds = self.stages[self.stage]
        self.left = n = self.counts[self.stage]
        state = self.rng.bit_generator.state
        total = sum(float(self.rng.exponential(1.0 / rate, min(CHUNK, n - k)).sum())
                    for k in range(0, n, CHUNK))  # fmt: skip
        self.rng.bit_generator.state = state
        self.scale, self.drawn = seconds / total, 0.0

    def take(self, n: int):
        times, stage = [], []
        while n:
            while not self.left:
                self._next_stage()
            k = min(n, self.left)
            gaps = self.rng.exponential(1.0 / self.stages[self.stage][0], k)
            times.append(self.start + (self.drawn + np.cumsum(gaps)) * self.scale)
            stage.append(np.full(k, self.stage))
            self.drawn += float(gaps.sum())
            self.left -= k
            n -= k
        return np.concatenate(times), np.concatenate(stage)


def _chunks(draw: Callable, drawn: int, count: int, rng):
    """The first `count` of `drawn` requests' lengths, drawn `CHUNK` at a time."""
    for start in range(0, min(drawn, count), CHUNK):
        found = draw(start, min(CHUNK, drawn - start), rng)
        yield tuple(None if v is None else v[: count - start] for v in found)


def requests(dataset: str, num_prompts: int | None = None, seed: int = 0) -> Requests:
    """`num_prompts` requests of `dataset`, their lengths drawn with `seed`;
    None: every request of a file of timestamps, else DEFAULT_PROMPTS. One
    pass over their lengths finds the longest and the arrivals' stream."""
    if num_prompts is not None and (
        isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts <= 0
    ):
        raise DlperfError(f"--num-prompts must be a positive whole number, not {num_prompts!r}")
    if dataset.startswith("shared-prefix:"):
        count, draw, given = num_prompts or DEFAULT_PROMPTS, _shared_prefix(dataset), None
    else:
        count, draw, given = _source(dataset, num_prompts)
    rng, longest = np.random.default_rng(seed), [0, 0, 0]
    for inputs, outputs, _, _ in _chunks(draw, count, count, rng):
        longest = [max(longest[0], int(inputs.max())), max(longest[1], int(outputs.max())),
                   max(longest[2], int((inputs + outputs).max()))]  # fmt: skip
    return Requests(dataset, count, seed, draw, count, rng.bit_generator.state, *longest, given)


def workload(
    dataset: str,
    num_prompts: int | None = None,
    request_rate: float = math.inf,
    seed: int = 0,
) -> Workload:
    """`num_prompts` requests of `dataset` arriving at `request_rate` per
    second, held whole (a test's or a small run's)."""
    return gathered(requests(dataset, num_prompts, seed).arriving(request_rate))


def gathered(stream) -> Workload:
    """A stream's chunks joined into one `Workload`."""
    chunks = list(stream)

    def joined(name):
        parts = [getattr(c, name) for c in chunks]
        return None if parts[0] is None else np.concatenate(parts)

    return Workload(*(joined(n) for n in ("arrival_s", "input_len", "output_len")),
                    chunks[0].dataset, joined("group"), joined("prefix_len"),
                    joined("stage"))  # fmt: skip


def _source(dataset: str, n: int | None):
    """(requests sent, their draw, a file's sorted arrival times or None) for
    n requests (None: a JSONL file's timed requests, else DEFAULT_PROMPTS)."""
    path = Path(dataset)
    if path.suffix == ".jsonl":
        return _jsonl(path, n)
    n = n or DEFAULT_PROMPTS
    if dataset.startswith("random:"):
        i, o, spread = _random_spec(dataset)

        def draw(start, k, rng):
            return _uniform(i, spread, k, rng), _uniform(o, spread, k, rng), None, None

        return n, draw, None
    if dataset == "sharegpt":
        raise DlperfError(
            "dlperf ships no ShareGPT lengths (they need the dataset and your model's "
            'tokenizer); write them as FILE.jsonl, one {"input_len": I, "output_len": O} '
            "per line, and pass --dataset FILE.jsonl"
        )
    if path.suffix == ".json":
        return n, _histogram(path), None
    raise DlperfError(
        f"unknown --dataset {dataset!r}; give random:in=I,out=O[,range=F], "
        "shared-prefix:system=S,question=Q,output=O,groups=G,users=U, FILE.jsonl (lengths "
        "per request) or FILE.json (a length histogram)"
    )


SHARED_PREFIX_KEYS = ("system", "question", "output", "groups", "users", "extra")


def _shared_prefix(text: str):
    """The draw of inference-perf's shared-prefix requests: (input lengths,
    output lengths, groups, shared prefix lengths), each request from a user
    drawn uniformly among groups x users, its group's system prompt first."""
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
    if (
        set(fields) != set(SHARED_PREFIX_KEYS)
        or fields["extra"] < 0
        or any(fields[k] <= 0 for k in SHARED_PREFIX_KEYS if k != "extra")
    ):
        raise DlperfError(usage)
    prompt = fields["system"] + fields["question"] + fields["extra"]

    def draw(start, n, rng):
        users = rng.integers(0, fields["groups"] * fields["users"], n)
        return (np.full(n, prompt), np.full(n, fields["output"]), users // fields["users"],
                np.full(n, fields["system"]))  # fmt: skip

    return draw


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
    """A file of timestamps (arrival_s on every line) sends its requests (the
    first n where n is given) in arrival order; lengths alone are cycled to n."""
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
    inputs = np.array([r[0] for r in rows])
    outputs = np.array([r[1] for r in rows])
    if untimed:  # cycled, as the file orders them

        def draw(start, k, rng):
            picked = np.arange(start, start + k) % len(rows)
            return inputs[picked], outputs[picked], None, None

        return n, draw, None
    arrivals = np.array([r[2] for r in rows[:n]], dtype=float)
    order = np.argsort(arrivals, kind="stable")
    inputs, outputs = inputs[:n][order], outputs[:n][order]

    def timed(start, k, rng):
        return inputs[start : start + k], outputs[start : start + k], None, None

    return n, timed, arrivals[order]


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


def _histogram(path: Path):
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise DlperfError(f"cannot read --dataset {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise DlperfError(f"--dataset {path} is not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise DlperfError(f"--dataset {path}: expected an object with input_len and output_len")
    bins = [_bins(doc.get(name), path, name) for name in ("input_len", "output_len")]

    def draw(start, n, rng):
        return _draw(*bins[0], n, rng), _draw(*bins[1], n, rng), None, None

    return draw


def _bins(hist, path: Path, name: str):
    """A histogram's (edges, probabilities), refused in one line when malformed."""
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
    return edges, counts / counts.sum()


def _draw(edges: np.ndarray, p: np.ndarray, n: int, rng) -> np.ndarray:
    bins = rng.choice(len(p), size=n, p=p)
    return np.floor(rng.uniform(edges[bins], edges[bins + 1])).astype(int)
