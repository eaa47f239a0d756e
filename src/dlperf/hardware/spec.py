"""A device described as data: `HardwareSpec` and the loader that validates it.

Every number in a spec file has its unit in its name. Physical facts (SMs,
clocks, peaks, bandwidth) come from datasheets and whitepapers; the named
efficiency constants (how close real kernels get to those facts) come from the
architecture defaults in `specs/_architectures.toml`, fitted on measured data,
and a spec file may override them in an `[efficiency]` table.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..dtypes import DTYPES, bytes_per_element, check_dtype
from ..errors import DlperfError
from .calibration import Calibration, calibration_from_dict
from .clocks import power_bandwidth_fraction, sustained_clock_fraction

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SPECS_DIR = Path(__file__).parent / "specs"
ARCHITECTURES_FILE = SPECS_DIR / "_architectures.toml"


@dataclass(frozen=True)
class MathUnit:
    """The units that run one dtype's multiply-adds."""

    peak_flops_per_s: float
    macs_per_clock_per_sm: float
    tensor_cores: bool


PHASES = ("forward", "backward")
ATTENTION_KEY = re.compile(r"^attention_(?P<backend>\w+)_(?P<phase>forward|backward)_efficiency$")


def attention_key(backend: str, phase: str) -> str:
    """The spec files' name of a fused attention kernel's efficiency in `phase`."""
    return f"attention_{backend}_{phase}_efficiency"


@dataclass(frozen=True)
class PhaseEfficiency:
    """A fused attention kernel's fraction of peak, forward and backward."""

    forward: float
    backward: float

    def of(self, phase: str) -> float:
        return {"forward": self.forward, "backward": self.backward}[phase]


@dataclass(frozen=True)
class Efficiency:
    """Named constants of the performance model (see docs/hardware-model.md).

    They are not physical facts: each is fitted on the measured data in
    ../shared/data per architecture family, and transfers to every device of
    that family. Their values live in one place, `specs/_architectures.toml`
    (the [default] table, then one table per family); none is written here.
    """

    # Fraction of the datasheet bandwidth a large streaming kernel reaches.
    dram_efficiency: float
    # Fraction of the datasheet bandwidth an element-wise or reduction kernel
    # reaches on data its producer just left in L2 (what benchmarks that rerun
    # one op see), and on data far larger than L2 that streams from DRAM (0: the
    # same; measured 0.845 on the A100, 0.875 taken for Hopper and Blackwell).
    streaming_dram_efficiency: float
    cold_dram_efficiency: float
    # Fraction of peak a large GEMM main loop reaches, Tensor Core and CUDA core paths.
    tensor_math_efficiency: float
    simt_math_efficiency: float
    # The highest fraction of the dense Tensor Core peak any GEMM reaches on the
    # device as it ships (maximum achievable matmul FLOPS): no tile runs faster.
    tensor_ceiling_efficiency: float
    # A tile of tm x tn reuses each loaded element r = tm*tn/(tm+tn) times; its main
    # loop runs at r / (r + tile_reuse_knee) of the attainable math rate.
    tile_reuse_knee: float
    # The knee of TF32 Tensor Core kernels where they differ (0: the same). Hopper's
    # wgmma takes 32-bit operands only K-major, so a B operand stored [K, N] is
    # restaged per tile: each loaded element costs more than in 16-bit kernels.
    tf32_tile_reuse_knee: float
    # Share of a GEMM's output write that its epilogue does not overlap with the
    # main loop of the next wave (0: stores fully hidden).
    serial_store_share: float
    # Fixed cost of one thread-block tile (pipeline fill, epilogue), in SM clock cycles.
    tile_fixed_cycles: float
    # Share of that fixed cost each wave after the first pays again (1: every wave
    # pays it in full, as non-persistent kernels do).
    later_wave_fixed_share: float
    # Fixed device time of a GEMM kernel (launch ramp, first loads, drain), and of
    # a memory-bound kernel where the family's own kernel-timed data fits it (0:
    # the same); the idle gap between two kernels back to back on one stream, and
    # in a CUDA graph (`kernels.fixed_costs`; 0 where the fit already holds it).
    kernel_latency_s: float
    streaming_latency_s: float
    stream_gap_s: float
    graph_gap_s: float
    # How many times its even share of DRAM bandwidth one busy SM can draw.
    sm_bandwidth_share: float
    # Math-rate factor of Tensor Core kernels when a GEMM dimension breaks the
    # 16-byte alignment (narrow loads), and when it meets 16 but not the best
    # (128-byte) alignment of Ampere and later.
    misaligned_tensor_efficiency: float
    unaligned_best_efficiency: float
    # Power limits, in watts per GHz of clock under a full GEMM load: per CUDA
    # core for kernels on CUDA cores, per SM for Tensor Core kernels. A card whose
    # TDP is below that demand holds a lower sustained clock (the 70-75 W T4 and
    # P4, say). 0 disables the limit.
    simt_watts_per_core_ghz: float
    tensor_watts_per_sm_ghz: float
    # Clock under a power cap: a card at its rated clock under a full Tensor Core
    # load draws its TDP; idle power is this share of the TDP, and the rest grows
    # as clock ** power_clock_exponent (dynamic power ~ f V^2, V rising with f).
    idle_power_share: float
    power_clock_exponent: float
    # Bytes an SM must have in flight for a memory-bound kernel to draw its share
    # of bandwidth: smaller tensors sit on the latency plateau (seed 000, fig. 1-3).
    saturation_bytes_per_sm: float
    # Batched GEMM libraries choose among fewer tiles: none smaller than this
    # many output elements (a library heuristic, fitted like the rest).
    batched_min_tile_area: float
    # Host-side cost of one eager framework call (dispatch + launch), added to a
    # kernel's time only where a measurement includes it.
    eager_call_overhead_s: float
    # CPU convolutions (oneDNN) run at c / (c + knee) of the matmul rate, c being the
    # GEMM's channel reduction C*R*S: short dot products vectorize badly. 0: no loss.
    conv_reduction_knee: float
    # How many times faster than DRAM a memory-bound kernel streams bytes found in
    # the last-level cache (`l2_cache_bytes`); a CPU kernel of b bytes finds a share
    # 1 - b/cache of them there (data its producers just wrote). 1: no gain.
    llc_streaming_speedup: float
    # Bytes per second a CPU's OS faults in and zeroes for a freshly allocated
    # large tensor (`pricing.first_touch_s`); 0: no such cost (a GPU's caching
    # allocator reuses its blocks).
    first_touch_bytes_per_s: float
    # Random numbers per second a CPU's generator draws for dropout's mask
    # (`pricing.random_s`); 0: not limiting (a GPU's Philox keeps up with memory).
    random_elements_per_s: float
    # Bytes per SM a persistent kernel keeps on chip (the register file: 256 KiB per
    # SM from Maxwell on); a batch norm whose tensor fits in all SMs' share makes one pass.
    on_chip_bytes_per_sm: float
    # Fraction of the device's peak math rate (its attention dtype, sustained clock)
    # that a fused attention kernel's main loop reaches, per backend and phase: the
    # file's attention_<backend>_<phase>_efficiency constants, by backend (the
    # kernels of `kernels.attention_backends`). Not fitted: taken from the kernels'
    # papers (FlashAttention-2, Dao 2023; FlashAttention-3, Shah et al. 2024), see
    # `specs/_architectures.toml`.
    attention: Mapping[str, PhaseEfficiency]
    # Exponentials (and other special functions) an SM computes per clock: the
    # softmax's share of a fused attention kernel (CUDA guide's throughput table).
    special_function_ops_per_clock_per_sm: float
    # K/V steps a fused attention backward's thread block pays beyond its main loop
    # (its tiles in, dK and dV out, and the dQ pass's share), where the forward pays
    # one; a causal mask adds the diagonal's two (`kernels.attention`).
    attention_backward_overhead_steps: float

    @classmethod
    def from_constants(cls, values: dict[str, float]) -> Efficiency:
        """Build from a file's flat constants (`field_names`), all of them given."""
        scalars = {k: v for k, v in values.items() if not ATTENTION_KEY.match(k)}
        rates: dict[str, dict[str, float]] = {}
        for key, value in values.items():
            found = ATTENTION_KEY.match(key)
            if found:
                rates.setdefault(found["backend"], {})[found["phase"]] = value
        attention = {name: PhaseEfficiency(**phases) for name, phases in rates.items()}
        return cls(**scalars, attention=attention)

    def constants(self) -> dict[str, float]:
        """The flat constants a spec file's [efficiency] table names, in field order."""
        out: dict[str, float] = {}
        for f in dataclasses.fields(self):
            if f.name != "attention":
                out[f.name] = getattr(self, f.name)
                continue
            for backend, rates in self.attention.items():
                for phase in PHASES:
                    out[attention_key(backend, phase)] = rates.of(phase)
        return out

    @classmethod
    def defaults(cls) -> Efficiency:
        """The [default] table of `specs/_architectures.toml`."""
        return cls.from_constants(
            {k: float(v) for k, v in _architecture_defaults()["default"].items()}
        )

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The constants a spec file may set: the fields, and the attention
        backends' per phase (those the [default] table gives)."""
        return _constant_names()


@functools.cache
def _constant_names() -> tuple[str, ...]:
    return tuple(Efficiency.defaults().constants())


@dataclass(frozen=True)
class HardwareSpec:
    id: str
    name: str
    architecture: str
    sm_count: int
    boost_clock_mhz: float
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    l2_cache_bytes: int
    math: dict[str, MathUnit]
    efficiency: Efficiency = field(default_factory=lambda: Efficiency.defaults())
    kind: str = "gpu"
    chip: str = ""
    compute_capability: str = ""
    tensor_core_clock_mhz: float | None = None
    # The Tensor Core clock a full load holds where the card's TDP cannot feed the
    # rated one (`hardware.clocks`); None: the rated clock.
    sustained_tensor_clock_mhz: float | None = None
    tdp_watts: float | None = None
    # A cap below the TDP (`nvidia-smi -pl`, `--power-limit`): the clock drops to
    # what the cap feeds (`hardware.clocks`). None: the card's own TDP.
    power_limit_watts: float | None = None
    # The PyTorch version whose kernels run (SDPA's dispatcher order); "": the installed one.
    torch_version: str = ""
    # The CUDA context as the user's driver and PyTorch build take it (`--cuda-context`,
    # nvidia-smi's figure after the first CUDA call). None: the framework file's.
    cuda_context_bytes: int | None = None
    nvlink_bandwidth_bytes_per_s: float | None = None
    # GPUs one NVLink fabric joins when it spans several nodes (GB200 NVL72: 72, across
    # its 4-GPU trays); None: the node's GPUs (`parallel.network.interconnect_for`).
    nvlink_domain_gpus: int | None = None
    # Each GPU's share of the scale-out network of the system the spec describes (its
    # NIC); None: the architecture's reference node (`_interconnect.toml`).
    network_bytes_per_s_per_gpu: float | None = None
    pcie_bandwidth_bytes_per_s: float | None = None
    # Tensor Cores load operands in 16-byte pieces; Ampere and later run best
    # with 128-byte aligned dimensions (seed 002/003, Table 1).
    tensor_alignment_bytes: int = 16
    tensor_best_alignment_bytes: int = 16
    aliases: tuple[str, ...] = ()
    device_names: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    path: str = ""
    # What a profiler trace of the user's run corrected (`dlperf calibrate --trace`).
    calibration: Calibration | None = None

    # -- derived facts -------------------------------------------------
    def has_dtype(self, dtype: str) -> bool:
        return check_dtype(dtype) in self.math

    def unit(self, dtype: str) -> MathUnit:
        dtype = check_dtype(dtype)
        if dtype not in self.math:
            have = ", ".join(d for d in DTYPES if d in self.math)
            raise DlperfError(f"{self.id} has no {dtype} math; it runs: {have}")
        return self.math[dtype]

    def peak_flops_per_s(self, dtype: str) -> float:
        return self.unit(dtype).peak_flops_per_s

    def uses_tensor_cores(self, dtype: str) -> bool:
        return self.unit(dtype).tensor_cores

    def ridge_ops_per_byte(self, dtype: str) -> float:
        """FLOPs per byte above which a kernel is math-limited (peak / bandwidth)."""
        return self.peak_flops_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    def alignment_elements(self, dtype: str) -> tuple[int, int]:
        """(required, best) multiples for GEMM dimensions on Tensor Cores."""
        size = bytes_per_element(dtype)
        return (
            max(1, self.tensor_alignment_bytes // size),
            max(1, self.tensor_best_alignment_bytes // size),
        )

    def clock_hz(self, tensor_cores: bool = False) -> float:
        if tensor_cores and self.tensor_core_clock_mhz:
            return self.tensor_core_clock_mhz * 1e6
        return self.boost_clock_mhz * 1e6

    def sustained_clock_fraction(self, tensor_cores: bool = False) -> float:
        """Fraction of the rated clock the SMs hold under a full math load, under
        the card's power limit (`hardware.clocks`)."""
        return sustained_clock_fraction(self, tensor_cores)

    def sustained_bandwidth_bytes_per_s(self) -> float:
        """The memory bandwidth the card can stream at under its power limit
        (`hardware.clocks.power_bandwidth_fraction`): the datasheet's without one."""
        return self.memory_bandwidth_bytes_per_s * power_bandwidth_fraction(self)

    def computed_peak_flops_per_s(self, dtype: str) -> float:
        """SMs x clock x multiply-adds per clock per SM x 2."""
        unit = self.unit(dtype)
        return self.sm_count * self.clock_hz(unit.tensor_cores) * unit.macs_per_clock_per_sm * 2

    def summary(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "architecture": self.architecture,
            "sm_count": self.sm_count,
            "boost_clock_mhz": self.boost_clock_mhz,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "l2_cache_bytes": self.l2_cache_bytes,
            "peak_flops_per_s": {d: u.peak_flops_per_s for d, u in self.math.items()},
            "tensor_cores": {d: u.tensor_cores for d, u in self.math.items()},
            "aliases": list(self.aliases),
        }

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["efficiency"] = self.efficiency.constants()
        out["aliases"] = list(self.aliases)
        out["device_names"] = list(self.device_names)
        out["sources"] = list(self.sources)
        out["calibration"] = self.calibration.to_dict() if self.calibration else None
        return out


# -- loading and validation ----------------------------------------------

_REQUIRED = {
    "id": str,
    "name": str,
    "architecture": str,
    "sm_count": int,
    "boost_clock_mhz": float,
    "memory_bytes": int,
    "memory_bandwidth_bytes_per_s": float,
    "l2_cache_bytes": int,
}
_OPTIONAL = {
    "kind": str,
    "chip": str,
    "compute_capability": str,
    "tensor_core_clock_mhz": float,
    "sustained_tensor_clock_mhz": float,
    "tdp_watts": float,
    "power_limit_watts": float,
    "torch_version": str,
    "cuda_context_bytes": int,
    "nvlink_bandwidth_bytes_per_s": float,
    "nvlink_domain_gpus": int,
    "network_bytes_per_s_per_gpu": float,
    "pcie_bandwidth_bytes_per_s": float,
    "tensor_alignment_bytes": int,
    "tensor_best_alignment_bytes": int,
}
_LISTS = ("aliases", "device_names", "sources")


def _bad(where: str, key: str, why: str) -> DlperfError:
    return DlperfError(f"{where}: field '{key}' {why}")


def _number(where: str, key: str, value, kind: type, allow_zero: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, key, f"must be a number (got {value!r})")
    if isinstance(value, float) and not math.isfinite(value):  # int(inf) would overflow
        raise _bad(where, key, f"must be a finite number (got {value!r})")
    if kind is int:
        if float(value) != int(value):
            raise _bad(where, key, f"must be a whole number (got {value!r})")
        value = int(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        need = "zero or positive" if allow_zero else "positive"
        raise _bad(where, key, f"must be {need} (got {value!r})")
    return kind(value)


def _architecture_defaults() -> dict:
    with open(ARCHITECTURES_FILE, "rb") as f:
        return tomllib.load(f)


def spec_from_dict(raw: dict, where: str = "spec", arch_defaults: dict | None = None):
    """Validate a parsed spec document and build a `HardwareSpec`."""
    if not isinstance(raw, dict):
        raise DlperfError(f"{where}: expected a table of fields at the top level")
    if arch_defaults is None:
        arch_defaults = _architecture_defaults()
    values = _scalar_fields(raw, where)
    values["math"] = _math_units(raw.get("math"), where)
    arch = values["architecture"].lower()
    values["architecture"] = arch
    family = arch_defaults.get(arch, {})
    if arch not in arch_defaults and "efficiency" not in raw:
        known = ", ".join(sorted(k for k in arch_defaults if k != "default"))
        raise _bad(where, "architecture", f"{arch!r} is unknown; use one of {known}")
    for key in ("tensor_alignment_bytes", "tensor_best_alignment_bytes"):
        if key in family and key not in values:
            values[key] = int(family[key])
    values["efficiency"] = _efficiency(raw, where, arch_defaults.get("default", {}), family)
    if raw.get("calibration") is not None:
        values["calibration"] = calibration_from_dict(raw["calibration"], where)
    values["path"] = where
    spec = HardwareSpec(**values)
    check_settings(spec, where)
    return spec


def _scalar_fields(raw: dict, where: str) -> dict:
    """The required, optional and list fields of a spec document, checked."""
    values: dict = {}
    for key, kind in _REQUIRED.items():
        if key not in raw:
            raise _bad(where, key, "is missing")
        if kind is str:
            if not isinstance(raw[key], str) or not raw[key]:
                raise _bad(where, key, f"must be a non-empty string (got {raw[key]!r})")
            values[key] = raw[key]
        else:
            values[key] = _number(where, key, raw[key], kind)
    for key, kind in _OPTIONAL.items():
        if raw.get(key) is not None:  # JSON null means absent
            if kind is str:
                values[key] = str(raw[key])
            else:
                values[key] = _number(where, key, raw[key], kind)
    for key in _LISTS:
        items = raw.get(key, [])
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise _bad(where, key, "must be a list of strings")
        values[key] = tuple(items)
    return values


def _math_units(math_raw, where: str) -> dict[str, MathUnit]:
    """The [math.<dtype>] tables."""
    if not isinstance(math_raw, dict) or not math_raw:
        raise _bad(where, "math", "must be a table with at least one dtype (e.g. [math.fp32])")
    units = {}
    for dtype, unit in math_raw.items():
        if dtype not in DTYPES:
            raise _bad(where, f"math.{dtype}", f"is not a dtype; use one of {', '.join(DTYPES)}")
        if not isinstance(unit, dict):
            raise _bad(where, f"math.{dtype}", "must be a table")
        tc = unit.get("tensor_cores", False)
        if not isinstance(tc, bool):
            raise _bad(where, f"math.{dtype}.tensor_cores", "must be true or false")
        units[dtype] = MathUnit(
            peak_flops_per_s=_number(
                where, f"math.{dtype}.peak_flops_per_s", unit.get("peak_flops_per_s"), float
            ),
            macs_per_clock_per_sm=_number(
                where,
                f"math.{dtype}.macs_per_clock_per_sm",
                unit.get("macs_per_clock_per_sm"),
                float,
            ),
            tensor_cores=tc,
        )
    return units


def _efficiency(raw: dict, where: str, default: dict, family: dict) -> Efficiency:
    """The [default] constants, the family's over them, the file's [efficiency] over those."""
    names = Efficiency.field_names()
    base = dict(default)
    base.update({k: v for k, v in family.items() if k in names})
    override = raw.get("efficiency", {})
    if not isinstance(override, dict):
        raise _bad(where, "efficiency", "must be a table")
    for key, value in override.items():
        if key not in names:
            raise _bad(where, f"efficiency.{key}", "is not a known constant")
        base[key] = value
    eff = {}
    for key, value in base.items():
        eff[key] = _number(where, f"efficiency.{key}", value, float, allow_zero=True)
    return Efficiency.from_constants(eff)


CPU_POWER_LIMIT = "--power-limit applies to GPUs; the CPU's clock is what the probe measured"
CPU_CUDA_CONTEXT = "--cuda-context describes a GPU's CUDA context; a CPU has none: drop it"
# "2.5", "2.5.1", and what torch.__version__ prints ("2.14.1+cu130", "2.6.0a0+git1234",
# a nightly's "2.1.0.dev20230101+cu118").
TORCH_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(?:a|b|rc|dev|post)\d*)?(?:\+[\w.]+)?$")


# The PyTorch versions whose kernels dlperf follows (the installed one too, if newer).
OLDEST_TORCH = (1, 0)
NEWEST_TORCH = (2, 14)


def _known_torch(version: tuple[int, ...]) -> bool:
    if OLDEST_TORCH <= version[:2] <= NEWEST_TORCH:
        return True
    import torch  # only for a version past the newest known: the installed one is known

    installed = parse_torch_version(torch.__version__)
    return installed is not None and version[:2] == installed[:2]


def parse_torch_version(text: str) -> tuple[int, ...] | None:
    """(major, minor) or (major, minor, patch) of a PyTorch version; None if it is not one."""
    found = TORCH_VERSION.match(text.strip())
    if not found:
        return None
    return tuple(int(part) for part in found.groups() if part is not None)


def check_settings(spec: HardwareSpec, where: str) -> None:
    """Refuse a power limit or a PyTorch version the device cannot take.
    `where` names a spec file ("" for the command line's options)."""
    limit = spec.power_limit_watts
    flag = f"{where}: power_limit_watts" if where else "--power-limit"
    if limit is not None:
        if spec.kind == "cpu":
            raise DlperfError(CPU_POWER_LIMIT)
        if not math.isfinite(limit) or limit <= 0:
            raise DlperfError(f"{flag} must be a positive number of watts (got {limit})")
        if spec.tdp_watts and limit > spec.tdp_watts:
            raise DlperfError(
                f"{flag} {limit:g} W is above the {spec.id}'s {spec.tdp_watts:g} W TDP; "
                "a cap can only lower it"
            )
        if not spec.tdp_watts:
            raise DlperfError(f"{flag} needs the device's tdp_watts, which {spec.id} does not give")
        idle = spec.efficiency.idle_power_share * spec.tdp_watts
        if limit <= idle:
            raise DlperfError(
                f"{flag} {limit:g} W is at or below the {spec.id}'s idle draw ({idle:g} W): "
                "no clock runs there; give more watts"
            )
    eff = spec.efficiency
    if not 0 <= eff.idle_power_share < 1 or eff.power_clock_exponent <= 0:
        where_ = where or spec.id
        raise DlperfError(
            f"{where_}: efficiency.idle_power_share must be in [0, 1) and "
            "efficiency.power_clock_exponent positive"
        )
    context = spec.cuda_context_bytes
    if context is not None:
        name = f"{where}: cuda_context_bytes" if where else "--cuda-context"
        if spec.kind == "cpu":
            raise DlperfError(CPU_CUDA_CONTEXT.replace("--cuda-context", name))
        if context <= 0:
            raise DlperfError(f"{name} must be a positive size (got {context})")
    version = spec.torch_version
    if version:
        name = f"{where}: torch_version" if where else "--torch-version"
        parsed = parse_torch_version(version)
        if parsed is None:
            raise DlperfError(f"{name} {version!r} is not a version like 2.5 or 2.8.0")
        if not _known_torch(parsed):
            oldest, newest = (".".join(map(str, v)) for v in (OLDEST_TORCH, NEWEST_TORCH))
            raise DlperfError(
                f"{name} {version} is not a PyTorch release dlperf knows: give one from "
                f"{oldest} to {newest}"
            )


def load_spec_file(path: str | Path) -> HardwareSpec:
    """Read a TOML or JSON spec file. Parsing data never runs code."""
    path = Path(path)
    if path.is_dir():
        raise DlperfError(f"spec file {path} is a folder: give a .toml or .json spec file in it")
    if not path.is_file():
        raise DlperfError(
            f"spec file {path} does not exist: give the path of a .toml or .json spec "
            "file, or a GPU of the catalogue (`dlperf gpus` lists them)"
        )
    try:
        if path.suffix.lower() == ".json":
            raw = json.loads(path.read_text())
        else:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DlperfError(f"spec file {path} is not valid TOML/JSON: {first}") from None
    return spec_from_dict(raw, where=str(path))
