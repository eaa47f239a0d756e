"""Weight-only quantized GEMMs (int8 and int4 weights, 16-bit activations and math).

Such a kernel reads each weight at 1 or 0.5 byte plus its group's scale (and
zero point), turns it back into a 16-bit number in registers, and multiplies:

- Bytes per weight: bits / 8 + (scale + zero) / group. int4 stores a 16-bit
  scale and a 16-bit zero per group (AWQ's and tinygemm's asymmetric groups:
  0.5 + 4/32 = 0.625 B at group 32, 0.5 + 4/128 = 0.53 B at 128); int8 a 16-bit
  scale per group, no zero (symmetric).
- Dequantization on CUDA cores, in lane-instructions per weight and per pass
  over it: the fast conversions of FasterTransformer/TensorRT-LLM turn eight
  packed nibbles into fp16 with about one bit-operation (LOP3) or subtract per
  weight, then apply scale and zero with one HFMA2 per two weights: 1.5 for
  int4; int8 needs no nibble split: half a byte-permute conversion and half
  an HFMA2 for its scale, 1.0. The Tensor Core kernel dequantizes a weight tile
  once per row-tile of the output (ceil(M / 128) passes); the GEMV once, and
  its multiply-adds are HFMA2s: half an instruction per weight and token.
- The GEMV (fewer than 5 tokens: TensorRT-LLM's CUDA-core batched GEMV) streams
  its weights from DRAM, far larger than L2, at `cold_dram_efficiency` and does
  its multiply-adds and dequantization on CUDA cores. Each warp dequantizes
  what its own loads brought, so the two do not overlap: a weight-only GEMV
  runs well below a plain stream's bandwidth.
"""

from __future__ import annotations

import math

from ..dtypes import runnable_dtype
from ..hardware import HardwareSpec
from .roofline import cold_efficiency

DEFAULT_GROUP = 128
# The role of a few-token weight-only GEMM: TensorRT-LLM's CUDA-core batched GEMV
# (WeightOnlyQuantMatmulPlugin's small-M path), below this many tokens.
GEMV_ROLE = "weight-only GEMV"
GEMV_BELOW_TOKENS = 5
HALF_BYTES = 2  # a 16-bit scale or zero point
# CUDA-core lane-instructions to turn one weight back into a 16-bit value.
DEQUANT_INSTRUCTIONS = {4: 1.5, 8: 1.0}
# The GEMV's multiply-adds: one HFMA2 for two weights of one token.
FMA_INSTRUCTIONS = 0.5
# Output rows a Tensor Core kernel's tile covers: one dequantization pass each.
TILE_ROWS = 128


def bytes_per_weight(bits: int, group: int) -> float:
    """Stored bytes of one weight with its share of the group's scale (and zero)."""
    zero = HALF_BYTES if bits == 4 else 0
    return bits / 8 + (HALF_BYTES + zero) / group


def _instruction_rate(spec: HardwareSpec) -> float:
    """CUDA-core lane-instructions per second: the fp32 FMA rate (two FLOPs each)."""
    unit = spec.unit(runnable_dtype("fp32", spec))
    return unit.peak_flops_per_s / 2 * spec.sustained_clock_fraction(False)


def dequant_s(spec: HardwareSpec, weights: float, bits: int, tokens: int) -> float:
    """CUDA-core time to dequantize `weights` once per output row-tile."""
    passes = max(1, math.ceil(tokens / TILE_ROWS))
    return weights * passes * DEQUANT_INSTRUCTIONS[bits] / _instruction_rate(spec)


def gemv_terms(spec: HardwareSpec, weights: float, bits: int, tokens: int, moved: float):
    """(memory_s, alu_s) of the CUDA-core weight-only GEMV: the `moved` bytes
    (its weights as stored, activations in, output out) streamed from DRAM; the
    multiply-adds and the dequantization of `weights` on CUDA cores, in turn."""
    bandwidth = spec.sustained_bandwidth_bytes_per_s() * cold_efficiency(spec)
    fma_s = weights * tokens * FMA_INSTRUCTIONS / _instruction_rate(spec)
    alu = fma_s + dequant_s(spec, weights, bits, tokens)
    return moved / bandwidth, alu
