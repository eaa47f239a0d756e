"""Pipeline schedules: how many micro-batches a stage holds in flight, the
bubble, and how often a micro-batch crosses a stage boundary.

- gpipe (Huang et al. 2019): all m forwards, then all m backwards. Every
  stage holds the activations of all m micro-batches.
- 1f1b (PipeDream-Flush, Narayanan et al. 2021): after p warm-up forwards a
  stage alternates one forward and one backward; the first stage holds p
  micro-batches (stage i holds p - i), the last one.
- interleaved:V (Narayanan et al. 2021, section 2.2): each GPU holds V
  chunks of blocks; the bubble shrinks V-fold and every micro-batch crosses
  V times as many boundaries. The first stage holds p (1 + (p-1)/(p V))
  micro-batches' worth of its blocks (Korthikanti et al. 2022, section
  4.2.3). Megatron-LM requires m to be a multiple of p.

With p stages and m micro-batches of per-stage time t (forward and
backward), the step is m t plus the bubble (p - 1) t / V: (p - 1)/(m V) of
the ideal time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DlperfError

SCHEDULE_HELP = "gpipe, 1f1b or interleaved:V (V chunks of blocks per GPU)"


@dataclass(frozen=True)
class Schedule:
    kind: str  # "none" (no pipeline), "gpipe", "1f1b", "interleaved"
    chunks: int = 1  # V: chunks of blocks per GPU (interleaved only)

    @property
    def name(self) -> str:
        return f"interleaved:{self.chunks}" if self.kind == "interleaved" else self.kind

    def in_flight(self, stages: int, micro_batches: int, stage: int = 0) -> float:
        """Micro-batches whose activations stage `stage` (0 = first) holds at once,
        in units of one micro-batch through the stage's blocks."""
        if stages <= 1 or self.kind == "none":
            return 1.0
        if self.kind == "gpipe":
            return float(micro_batches)
        if self.kind == "interleaved":
            if stage == 0:
                return stages * (1 + (stages - 1) / (stages * self.chunks))
            return float(stages - stage)
        return float(min(stages - stage, micro_batches))

    def bubble_share(self, stages: int, micro_batches: int) -> float:
        """The bubble as a share of the ideal time: (p - 1) / (m V)."""
        if stages <= 1:
            return 0.0
        return (stages - 1) / (micro_batches * self.chunks)

    def boundary_crossings(self, stages: int) -> int:
        """Stage boundaries one micro-batch crosses forward: V p - 1."""
        return self.chunks * stages - 1 if stages > 1 else 0

    def allows(self, stages: int, micro_batches: int, blocks: int) -> bool:
        """Whether the schedule can run p stages, m micro-batches and these blocks."""
        if stages <= 1:
            return self.kind == "none"
        if self.kind == "none":
            return False
        if self.kind == "interleaved":
            return micro_batches % stages == 0 and blocks + OUTSIDE_CHUNKS >= stages * self.chunks
        return True


# The embedding and the loss may each stand in a virtual stage's place
# (Megatron-Core's account_for_embedding_in_pipeline_split and
# account_for_loss_in_pipeline_split: Llama-3.1 405B's 126 blocks run as 16 x 8).
OUTSIDE_CHUNKS = 2

NO_PIPELINE = Schedule("none")


def parse_schedule(text: str) -> Schedule:
    """'1f1b', 'gpipe' or 'interleaved:V' (V >= 2) as a Schedule."""
    value = str(text).strip().lower()
    if value in ("1f1b", "gpipe", "none"):
        return Schedule(value)
    kind, _, chunks = value.partition(":")
    if kind == "interleaved" and chunks.isdigit() and int(chunks) >= 2:
        return Schedule("interleaved", int(chunks))
    raise DlperfError(f"unknown pipeline schedule {text!r}; use {SCHEDULE_HELP}")


def searched_schedules(stages: int) -> list[Schedule]:
    """The schedules a search tries for p stages."""
    if stages <= 1:
        return [NO_PIPELINE]
    return [Schedule("1f1b"), Schedule("gpipe"), Schedule("interleaved", 2)]
