"""What a profiler trace of the user's own run taught about their device
(`dlperf calibrate --trace`), as a spec file's [calibration] table.

The catalogue's model prices each kernel from the device's datasheet and
constants fitted on other runs. A trace of the user's run measures the same
kernels on their device, driver and library versions, so the spec it writes
keeps the model and corrects its time per class of kernel:

    seconds = scale(layer, else op, else class x (work / reference) ** exponent)
              x predicted + (kernel_extra_s + host_gap_s) x kernels

- `scales`: per class (gemm, attention, memory-bound), the factor the trace's
  kernels of that class ran at against the prediction; for GEMMs also an
  exponent in their FLOPs (about 10^9 FLOPs the reference), their size
  dependence: small GEMMs lose more to fixed costs than the tile model says.
- `layer_scales`: each op of the traced model, by its place in the model (the
  model, module, phase, op, dtype and which of such calls it is), the factor
  it ran at: a layer's kernels are the ones the library picked for its
  shapes, so the same model at another batch or sequence length keeps them.
  Another model's ops have other keys and take the factors below.
- `op_scales`: memory-bound ops the trace shows enough of get their own factor
  (a CPU's random numbers or `tanh` run far from the streaming rate).
- `kernel_extra_s`: a fixed cost per kernel the prediction lacks.
- `host_gap_s`: on a CPU, the framework's own time between ops, per kernel
  (nothing overlaps it there); on a GPU the gap between kernels back to back
  is the spec's `stream_gap_s`, overridden in [efficiency].

A class the trace does not show keeps the catalogue's model (scale 1) and is
listed under `kept`; `notes` say what the user should know of the trace
itself (its steps far apart: a disturbed run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import DlperfError

CLASSES = ("gemm", "attention", "memory-bound")
FIELDS = (
    "source", "model", "base", "scales", "gemm_exponent", "op_scales", "kernel_extra_s",
    "host_gap_s", "fitted", "kept", "residuals", "layer_scales", "notes",
)  # fmt: skip
GEMM_REFERENCE_FLOPS = 1e9


@dataclass(frozen=True)
class Calibration:
    source: str  # the trace file
    model: str  # the model it was matched to
    base: str  # the catalogue device it extends
    scales: dict = field(default_factory=dict)  # class -> factor
    gemm_exponent: float = 0.0
    op_scales: dict = field(default_factory=dict)  # dlperf's op name (aten.tanh.default) -> factor
    kernel_extra_s: float = 0.0
    host_gap_s: float = 0.0
    fitted: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    residuals: dict = field(default_factory=dict)  # class -> |error| after the fit
    layer_scales: dict = field(default_factory=dict)  # layer_key -> factor
    notes: tuple[str, ...] = ()  # what the user should know of the trace (a noisy run)

    def seconds(self, seconds: float, kind: str, flops: float, kernels: int, op: str | None,
                eager: bool, layer: str | None = None) -> float:  # fmt: skip
        """A predicted kernel time corrected as the trace says."""
        scale = self.layer_scales.get(layer) if layer else None
        if scale is None and op:
            scale = self.op_scales.get(op)
        if scale is None:
            scale = self.scales.get(kind, 1.0)
            if kind == "gemm" and self.gemm_exponent and flops > 0:
                scale *= (flops / GEMM_REFERENCE_FLOPS) ** self.gemm_exponent
        extra = self.kernel_extra_s + (self.host_gap_s if eager else 0.0)
        return scale * seconds + extra * max(1, kernels)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "model": self.model,
            "base": self.base,
            "scales": dict(self.scales),
            "gemm_exponent": self.gemm_exponent,
            "op_scales": dict(self.op_scales),
            "kernel_extra_s": self.kernel_extra_s,
            "host_gap_s": self.host_gap_s,
            "fitted": list(self.fitted),
            "kept": list(self.kept),
            "residuals": dict(self.residuals),
            "layer_scales": dict(self.layer_scales),
            "notes": list(self.notes),
        }


def calibration_from_dict(raw, where: str) -> Calibration:
    """Validate a spec file's [calibration] table."""
    if not isinstance(raw, dict):
        raise DlperfError(f"{where}: [calibration] must be a table")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise DlperfError(
            f"{where}: calibration.{unknown[0]} is not a calibration field; use {', '.join(FIELDS)}"
        )
    # faults are looked for in this order, the strings last: a table with several is told the first
    scales = _class_scales(raw, where)
    ops = _factors(raw, "op_scales", where, 1e-6)
    lists = {key: _strings(raw, key, where) for key in ("fitted", "kept", "notes")}
    residuals = _factors(raw, "residuals", where)
    layers = _factors(raw, "layer_scales", where, 1e-6)
    exponent = raw.get("gemm_exponent", 0.0)
    return Calibration(
        _text(raw, "source", where),
        _text(raw, "model", where),
        _text(raw, "base", where),
        scales,
        _number("gemm_exponent", exponent, where, -1.0, 1.0),
        ops,
        _number("kernel_extra_s", raw.get("kernel_extra_s", 0.0), where),
        _number("host_gap_s", raw.get("host_gap_s", 0.0), where),
        lists["fitted"],
        lists["kept"],
        residuals,
        layers,
        lists["notes"],
    )


def _text(raw: dict, key: str, where: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise DlperfError(f"{where}: calibration.{key} must be a string")
    return value


def _number(key: str, value, where: str, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DlperfError(f"{where}: calibration.{key} must be a number (got {value!r})")
    if not math.isfinite(value) or not low <= value <= high:
        within = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise DlperfError(f"{where}: calibration.{key} must be a finite number {within}")
    return float(value)


def _table(raw: dict, key: str, where: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise DlperfError(f"{where}: calibration.{key} must be a table")
    return value


def _factors(raw: dict, key: str, where: str, low: float = 0.0) -> dict:
    """The table `key` of names to numbers of at least `low`."""
    return {
        name: _number(f"{key}.{name}", v, where, low) for name, v in _table(raw, key, where).items()
    }


def _class_scales(raw: dict, where: str) -> dict:
    scales = {}
    for kind, value in _table(raw, "scales", where).items():
        if kind not in CLASSES:
            raise DlperfError(
                f"{where}: calibration.scales.{kind} is not a class; use {', '.join(CLASSES)}"
            )
        scales[kind] = _number(f"scales.{kind}", value, where, 1e-6)
    return scales


def _strings(raw: dict, key: str, where: str) -> tuple[str, ...]:
    items = raw.get(key, [])
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise DlperfError(f"{where}: calibration.{key} must be a list of strings")
    return tuple(items)


def layer_keys(model: str, params: int, rows) -> list[str]:
    """Each row's place in the model: the model (its name and parameter
    count, so that another model of the same class and name does not take
    its factors), module, phase, op and dtype, and which of the rows sharing
    those it is (the i-th, in trace order). `rows` are (module, phase, op,
    dtype) tuples, all of the analysis's."""
    seen: dict[tuple, int] = {}
    keys = []
    for ident in rows:
        i = seen.get(ident, 0)
        seen[ident] = i + 1
        keys.append("|".join((f"{model}[{params}]", *map(str, ident))) + f"#{i}")
    return keys
