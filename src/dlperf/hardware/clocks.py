"""The clock a card sustains under a full math load, within its power limit.

Three effects, each from its own evidence:

- Cards whose TDP cannot feed their units at the datasheet clock (the 70-75 W
  T4, P4, L4): their demand grows linearly with the clock, per CUDA core or
  per SM (`simt_watts_per_core_ghz`, `tensor_watts_per_sm_ghz`, fitted on the
  measured GEMMs of ../shared/data), and the clock drops in proportion.
- A power cap below the TDP (`--power-limit`, `nvidia-smi -pl`, a spec's
  `power_limit_watts`): a card at its rated Tensor Core clock under a full
  load draws its TDP; a share `idle_power_share` of that is drawn whatever the
  clock, the rest grows as clock ** `power_clock_exponent` (dynamic power is
  f V^2, and the voltage rises with the clock). The exponent follows from two
  parts of one chip that NVIDIA rates at different powers: the 700 W H100 SXM
  at 1830 MHz and the 400 W H100 NVL at 1545 MHz (835 dense fp16 TFLOPS on
  132 SMs): with an idle tenth of 700 W, (400 - 70) / (700 - 70) =
  (1545 / 1830) ** a gives a = ln(0.5238) / ln(0.8443) = 3.82.

- A part whose datasheet rates the same silicon faster than its sibling, at a
  higher power, by more than the power law above grants
  (`sustained_tensor_clock_mhz`): GB200 is rated 2062 MHz at 1200 W, the
  B200 1856 MHz at 1000 W, but 200 W more feed the B200's silicon only
  1856 x (1100 / 900) ** (1 / 3.82) = 1956 MHz (its idle a tenth of 1000 W).
  Its spec gives that clock; a full Tensor Core load runs at it.

A power cap slows memory-bound work too (`power_bandwidth_fraction`): HBM
runs on its own clock, but moving a byte costs energy (the DRAM's own pJ/bit,
and the memory controllers, L2 and load/store path that carry it), so a card
capped below what streaming draws cannot stream at full bandwidth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import HardwareSpec


def _linear_demand_fraction(spec: HardwareSpec, tensor_cores: bool) -> float:
    """Below 1 where the card's TDP cannot feed its busy units at the datasheet clock."""
    eff = spec.efficiency
    ghz = spec.boost_clock_mhz / 1e3
    if tensor_cores:
        demand = eff.tensor_watts_per_sm_ghz * spec.sm_count * ghz
    else:
        cores = spec.math["fp32"].macs_per_clock_per_sm if "fp32" in spec.math else 0
        demand = eff.simt_watts_per_core_ghz * cores * spec.sm_count * ghz
    if not spec.tdp_watts or demand <= 0:
        return 1.0
    return min(1.0, spec.tdp_watts / demand)


def power_cap_fraction(spec: HardwareSpec) -> float:
    """Fraction of its rated clock a card holds under its `power_limit_watts`;
    1 without one, or at or above its TDP."""
    limit, tdp = spec.power_limit_watts, spec.tdp_watts
    if not limit or not tdp or limit >= tdp:
        return 1.0
    eff = spec.efficiency
    idle = eff.idle_power_share * tdp
    if limit <= idle:
        return 0.0
    return ((limit - idle) / (tdp - idle)) ** (1.0 / eff.power_clock_exponent)


# The assumption behind the bandwidth derate: of the dynamic power (TDP less the
# idle share) a card draws at full load, a streaming kernel at full bandwidth
# draws this share, and that draw grows linearly with the bytes per second (a
# fixed energy per byte). On an A100 (400 W, idle 40 W) streaming then draws
# 40 + 0.4 x 360 = 184 W: its five HBM2e stacks at about 3.9 pJ/bit move 2 TB/s
# for some 60 W, and carrying the bytes on chip (controllers, L2, crossbar,
# the SMs' loads and stores) about as much again. A cap at or above that draw
# leaves the bandwidth whole; below it the bandwidth falls in proportion to the
# watts left above idle (a 50 W cap streams at 10 / 144 of it).
MEMORY_POWER_SHARE = 0.4


def power_bandwidth_fraction(spec: HardwareSpec) -> float:
    """Fraction of its memory bandwidth a card can stream at under its
    `power_limit_watts`; 1 without one, or where the cap covers streaming's draw
    (`MEMORY_POWER_SHARE`)."""
    limit, tdp = spec.power_limit_watts, spec.tdp_watts
    if not limit or not tdp or limit >= tdp:
        return 1.0
    idle = spec.efficiency.idle_power_share * tdp
    streaming = MEMORY_POWER_SHARE * (tdp - idle)
    return min(1.0, max(0.0, limit - idle) / streaming)


def _sustained_tensor_fraction(spec: HardwareSpec, tensor_cores: bool) -> float:
    """Below 1 where the spec gives a sustained Tensor Core clock under its rated one."""
    rated, held = spec.tensor_core_clock_mhz, spec.sustained_tensor_clock_mhz
    if not tensor_cores or not rated or not held:
        return 1.0
    return min(1.0, held / rated)


def sustained_clock_fraction(spec: HardwareSpec, tensor_cores: bool = False) -> float:
    """Fraction of the rated clock held under a full math load (1.0 when no
    TDP or demand is known)."""
    return (
        _linear_demand_fraction(spec, tensor_cores)
        * _sustained_tensor_fraction(spec, tensor_cores)
        * power_cap_fraction(spec)
    )
