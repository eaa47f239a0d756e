"""Tile and wave quantization: GEMMs whose M and N leave tiles or waves partly idle."""

from __future__ import annotations

from ...kernels.gemm import gemm
from .. import fixes
from ..registry import TALK, Finding, rule
from .common import MIN_SHARE, severity, share

# A GEMM loses work worth a finding below this tile or (several-wave) efficiency.
QUANTIZED_BELOW = 0.75


def _quantized(g) -> bool:
    if min(g.m, g.n) < 64:  # skinny: no tile fits it, quantization is not the issue
        return False
    return (
        g.waves > 1 and g.wave_efficiency < QUANTIZED_BELOW or g.tile_efficiency < QUANTIZED_BELOW
    )


def _rounded_gain(ctx, g) -> tuple[float, int, int]:
    """(seconds saved, M, N) with M and N rounded up to whole tiles, per useful FLOP."""
    dtype = g.dtype if ctx.spec.has_dtype(g.dtype) else "fp32"
    # the tile is named "MxN" in the GEMM row
    tm, tn = (int(x) for x in g.tile.split("x"))
    m2, n2 = fixes.round_up(g.m, tm), fixes.round_up(g.n, tn)
    now = gemm(g.m, g.n, g.k, dtype, ctx.spec, g.batch)
    fixed = gemm(m2, n2, g.k, dtype, ctx.spec, g.batch)
    return max(0.0, (now.time_s - fixed.time_s * (g.m * g.n) / (m2 * n2)) * g.count), m2, n2


def _evidence(worst) -> dict:
    return {
        f"{module} {g.m}x{g.n}x{g.k}": {
            "tile": g.tile,
            "tile_efficiency": g.tile_efficiency,
            "waves": g.waves,
            "wave_efficiency": g.wave_efficiency,
            "suggested_mn": [m2, n2],
            "gain_s": gain,
        }
        for gain, module, g, m2, n2 in worst[:8]
    }


@rule(
    "gemm-quantization",
    "GEMMs losing work to tile or wave quantization",
    f"{TALK}, 'Tile quantization' and 'Wave quantization'",
)
def gemm_quantization(ctx):
    worst, saved = [], 0.0
    for r in ctx.analysis.rows:
        if r.bound != "math" or share(ctx, r.time_s) < 0.01:
            continue
        for g in filter(_quantized, r.gemms):
            gain, m2, n2 = _rounded_gain(ctx, g)
            if gain > 0:
                saved += gain
                worst.append((gain, r.module, g, m2, n2))
    fraction = share(ctx, saved)
    if fraction < MIN_SHARE:
        return []
    worst.sort(key=lambda item: item[0], reverse=True)
    fix = "; ".join(
        f"{module}: {g.m}x{g.n} -> {m2}x{n2} ({g.tile} tiles)" for _, module, g, m2, n2 in worst[:3]
    )
    return [
        Finding(
            "gemm-quantization",
            severity(fraction),
            list(dict.fromkeys(m for _, m, _, _, _ in worst)),
            _evidence(worst),
            "make M and N multiples of the tile, or change the batch so tiles fill "
            f"whole waves: {fix}",
            saved,
            fraction,
            how="priced by the GEMM model per useful FLOP, GEMM by GEMM",
        )
    ]
