"""The efficiency losses the guides warn about, as records.

A priced op carries its losses (`pricing.Timing.losses`): renderers and
advice rules read the fields; `describe()` makes the prose of notes from
them, so nothing parses prose back into data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..jsonable import fields_dict
from ..kinds import LossKind

# A GEMM's tiles are worth a word when padding wastes this share of their work or more.
TILE_NOTED_BELOW = 0.9
# Waves are: several waves keeping fewer SM slots busy than this share, or one
# partial wave keeping fewer than the second.
WAVES_NOTED_BELOW = 0.75
ONE_WAVE_NOTED_BELOW = 0.5


# The sentence of each loss, filled from its record's fields (`Loss.describe`).
PROSE = {
    LossKind.TILE: "tile quantization: {self.tile} tiles cover {self.m}x{self.n} with "
    "{self.wasted:.0%} padding work",
    LossKind.WAVE: "wave quantization: {self.tiles} tiles in {self.waves} waves keep "
    "{self.efficiency:.0%} of the SM slots busy (the last wave is partial)",
    "one wave": "only {self.tiles} tiles of {self.tile}: one partial wave leaves "
    "{self.wasted:.0%} of the SM slots idle",
    LossKind.ALIGNMENT: "{self.name}: Tensor Cores run below full efficiency "
    "(pad to {self.padded})",
    "best alignment": "{self.name}: {self.device} is most efficient with multiples of "
    "{self.multiple} (pad to {self.padded})",
    LossKind.LAYOUT: "NCHW: Tensor Core kernels transpose to NHWC",
    LossKind.REREAD: "2 read passes: {self.working_set_mib:.3g} MiB do not fit the "
    "{self.on_chip_mib:.3g} MiB on chip",
    LossKind.LATENCY: "latency-bound: too little work to fill the GPU",
}


@dataclass(frozen=True, kw_only=True)
class Loss:
    """One loss of a priced op; `gemm` is the index of the op's GEMM it
    belongs to (-1: the whole op)."""

    kind: ClassVar[LossKind]
    gemm: int = -1

    @property
    def prose(self) -> str:
        return PROSE[self.kind]

    def describe(self) -> str:
        return self.prose.format(self=self)

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, **fields_dict(self)}


@dataclass(frozen=True, kw_only=True)
class _Quantization(Loss):
    efficiency: float  # share of the work (tiles) or of the SM slots (waves) kept busy
    tile: str

    @property
    def wasted(self) -> float:
        return 1 - self.efficiency


@dataclass(frozen=True, kw_only=True)
class TileLoss(_Quantization):
    """Partial thread-block tiles compute padding."""

    kind = LossKind.TILE
    m: int
    n: int


@dataclass(frozen=True, kw_only=True)
class WaveLoss(_Quantization):
    """The last wave of tiles leaves SM slots idle."""

    kind = LossKind.WAVE
    tiles: int
    waves: int

    @property
    def prose(self) -> str:
        return PROSE[self.kind if self.waves > 1 else "one wave"]


@dataclass(frozen=True, kw_only=True)
class AlignmentLoss(Loss):
    """A GEMM dimension that is not a multiple Tensor Cores need (`required`)
    or run best with."""

    kind = LossKind.ALIGNMENT
    efficiency: float  # the math-rate factor the model applies
    dim: str  # "m", "n" or "k"
    size: int
    multiple: int
    required: bool
    device: str

    @property
    def prose(self) -> str:
        return PROSE[self.kind if self.required else "best alignment"]

    @property
    def name(self) -> str:
        return f"{self.dim.upper()}={self.size} is not a multiple of {self.multiple}"

    @property
    def padded(self) -> int:
        return -(-self.size // self.multiple) * self.multiple


@dataclass(frozen=True, kw_only=True)
class LayoutLoss(Loss):
    """NCHW data transposed to NHWC for a Tensor Core kernel, and back."""

    kind = LossKind.LAYOUT
    bytes: float  # the extra reads and writes


@dataclass(frozen=True, kw_only=True)
class RereadLoss(Loss):
    """An input read again because the kernel's working set does not fit on chip."""

    kind = LossKind.REREAD
    bytes: float
    working_set_bytes: float
    on_chip_bytes: float

    @property
    def working_set_mib(self) -> float:
        return self.working_set_bytes / 2**20

    @property
    def on_chip_mib(self) -> float:
        return self.on_chip_bytes / 2**20


@dataclass(frozen=True, kw_only=True)
class LatencyLoss(Loss):
    """Too little work to fill the device: the fixed cost of running sets the time."""

    kind = LossKind.LATENCY
    starved: bool  # fewer tiles than a quarter of the SMs


def alignment_losses(m: int, n: int, k: int, dtype: str, spec, gemm: int = -1) -> list[Loss]:
    """The dimensions of a GEMM run in `dtype` on `spec` that break Tensor Core
    alignment (none where CUDA cores run it). Only N and K: the kernels load
    along them, and a row count M costs a partial tile (tile quantization),
    not narrower loads."""
    if not spec.uses_tensor_cores(dtype):
        return []
    need, best = spec.alignment_elements(dtype)
    eff = spec.efficiency
    found = []
    for dim, size in (("n", n), ("k", k)):
        if size % need or size % best:
            required = bool(size % need)
            found.append(
                AlignmentLoss(
                    efficiency=eff.misaligned_tensor_efficiency
                    if required
                    else eff.unaligned_best_efficiency,
                    dim=dim,
                    size=size,
                    multiple=need if required else best,
                    required=required,
                    device=spec.id,
                    gemm=gemm,
                )
            )
    return found


def alignment_verdicts(losses: list[Loss]) -> dict[str, str]:
    """Per dimension: 'ok', or the multiple of elements it misses (the JSON form)."""
    out = dict.fromkeys(("m", "n", "k"), "ok")
    for loss in losses:
        if isinstance(loss, AlignmentLoss):
            out[loss.dim] = f"not a multiple of {loss.multiple}"
    return out


def quantization_losses(price, m: int, n: int, gemm: int = -1) -> list[Loss]:
    """The tile and wave losses of a priced GEMM (`gemm_tiles.GemmPrice`) worth a word."""
    found = []
    if price.tile_efficiency < TILE_NOTED_BELOW:
        found.append(
            TileLoss(efficiency=price.tile_efficiency, tile=price.tile, m=m, n=n, gemm=gemm)
        )
    few_waves = price.waves > 1 and price.wave_efficiency < WAVES_NOTED_BELOW
    one_wave = price.waves == 1 and price.wave_efficiency < ONE_WAVE_NOTED_BELOW
    if few_waves or one_wave:
        found.append(
            WaveLoss(
                efficiency=price.wave_efficiency,
                tiles=price.tiles,
                waves=price.waves,
                tile=price.tile,
                gemm=gemm,
            )
        )
    return found
