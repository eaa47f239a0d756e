"""Speculative decoding as a what-if: what a decode step costs and how many
tokens it yields when a proposer guesses `k` tokens and the model verifies
them in one forward.

Per step and sequence the proposer drafts k tokens (a small draft model: k
decode steps of its own; n-gram lookup in the prompt: host work, no GPU
time), then the target model runs one forward over the last token and the k
guesses (a decode step of k + 1 new tokens, traced as such: its GEMMs have
k + 1 times the rows, attention k + 1 queries). With each guess accepted
with probability `acceptance` independently of the others, the step yields
the accepted prefix plus the model's own next token (Leviathan et al. 2023,
"Fast Inference from Transformers via Speculative Decoding", eq. 1):

  tokens per step = (1 - a^(k+1)) / (1 - a)    (k + 1 when a = 1)

so the time per output token becomes (verify step + k draft steps) / that.
The acceptance rate is the user's: it depends on the text and the draft.
The options follow vLLM's --speculative-config: a JSON object with "method"
("ngram" or "draft_model"), "num_speculative_tokens", "model" (the draft)
and "acceptance_rate".
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import DlperfError

METHODS = ("ngram", "draft_model")


@dataclass(frozen=True)
class Speculation:
    method: str
    k: int
    acceptance: float
    draft: str | None = None


def parse_speculative(text: str | dict) -> Speculation:
    """A `Speculation` from vLLM-style --speculative-config JSON (or its dict)."""
    hint = (
        'expected JSON like {"method": "ngram", "num_speculative_tokens": 4, '
        '"acceptance_rate": 0.7} (or "method": "draft_model" with "model": "hf:...")'
    )
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except json.JSONDecodeError:
            raise DlperfError(f"--speculative-config is not JSON; {hint}") from None
    if not isinstance(text, dict):
        raise DlperfError(f"--speculative-config: {hint}")
    method, k = text.get("method"), text.get("num_speculative_tokens")
    acceptance, draft = text.get("acceptance_rate"), text.get("model")
    unknown = set(text) - {"method", "num_speculative_tokens", "acceptance_rate", "model"}
    if unknown:
        raise DlperfError(f"--speculative-config: unknown key {sorted(unknown)[0]!r}; {hint}")
    if method not in METHODS:
        raise DlperfError(f"--speculative-config: method must be one of {', '.join(METHODS)}")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 64:
        raise DlperfError("--speculative-config: num_speculative_tokens must be 1 to 64")
    if not isinstance(acceptance, (int, float)) or not 0 <= acceptance <= 1:
        raise DlperfError("--speculative-config: acceptance_rate must be in [0, 1]")
    if (method == "draft_model") != isinstance(draft, str):
        raise DlperfError('--speculative-config: "model" names the draft of "draft_model" only')
    return Speculation(method, k, float(acceptance), draft)


def tokens_per_step(k: int, acceptance: float) -> float:
    """Expected tokens a verify step yields (module docstring)."""
    if acceptance >= 1:
        return float(k + 1)
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def what_if(spec: Speculation, verify_s: float, draft_step_s: float, plain_step_s: float) -> dict:
    """The speculative step's figures beside the plain decode step's."""
    per_step = tokens_per_step(spec.k, spec.acceptance)
    step = verify_s + spec.k * draft_step_s
    tpot = step / per_step
    return {
        "method": spec.method,
        "draft_model": spec.draft,
        "num_speculative_tokens": spec.k,
        "acceptance_rate": spec.acceptance,
        "tokens_per_step": per_step,
        "verify_step_s": verify_s,
        "draft_step_s": draft_step_s,
        "step_s": step,
        "tpot_s": tpot,
        "plain_tpot_s": plain_step_s,
        "speedup": plain_step_s / tpot,
    }
