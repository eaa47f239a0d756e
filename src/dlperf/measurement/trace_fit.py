"""Fit a device's corrections from a trace of the user's run (`dlperf
calibrate --trace`); see `hardware.calibration` for what is fitted and how
it is applied.

The fit reads the comparison of the trace with the model's prediction. Per
matched op i of class c with predicted time p_i, k_i kernels and measured
time m_i, it solves m_i = s_c p_i + f k_i by least squares weighted by
1 / m_i (each op's squared error relative to its own time, times its share
of the step), then the GEMMs' size dependence (log of the ratio against the
log of their FLOPs), then a factor per memory-bound op with enough time in
the trace. What the step holds beyond its priced ops is the host's: on a CPU
spread over the kernels as a gap per kernel, on a GPU read off the trace as
the gap between kernels queued back to back.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict

import numpy as np

from ..errors import DlperfError
from ..hardware.calibration import CLASSES, GEMM_REFERENCE_FLOPS, Calibration
from .compare import Comparison, row_class, row_layer_keys
from .kineto import TraceData

MIN_ROWS = 3  # matched ops a class needs before its scale is fitted
MIN_OP_SHARE = 0.005  # of the memory-bound time, for an op's own factor
MIN_GAPS = 20  # back-to-back kernel pairs before the gap is fitted
# Steps of one trace further apart than this share of their median: a disturbed run
# (the same step of a quiet GPU repeats within a few per cent)
NOISY_STEPS = 0.10
# A factor outside this range says the op was not the one predicted (another
# kernel, another shape), not that the device runs it so: left unfitted.
FACTOR_RANGE = (1e-3, 1e3)
# The share of the model's predicted time a trace must hold as predicted (the op,
# at its input shapes) before it is fitted: below it the trace is of another model
# or another run, and the factors would say how far apart the two are.
MIN_MATCHED_SHARE = 0.5


def _sane(factor: float) -> bool:
    return FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]


def _check_match(analysis, comparison: Comparison) -> None:
    """Refuse a trace whose ops are not the model's as given (`MIN_MATCHED_SHARE`)."""
    share = comparison.matched_share
    if share >= MIN_MATCHED_SHARE:
        return
    how = "with the input shapes predicted" if comparison.other_shapes is not None else "by name"
    raise DlperfError(
        f"calibrate --trace: only {share:.0%} of {analysis.model}'s predicted time is on ops "
        f"found in {comparison.path} {how} (at least {MIN_MATCHED_SHARE:.0%} needed): is it a "
        "trace of this model, run with this --batch, --seq-len and --precision? (dlperf "
        "compare shows what matched)"
    )


def fit_calibration(analysis, comparison: Comparison, data: TraceData) -> tuple:
    """(Calibration, efficiency overrides) from `comparison` of `data` with `analysis`."""
    _check_match(analysis, comparison)
    rows = [r for r in comparison.rows if r.measured_s > 0 and r.predicted_s > 0]
    fitted, kept = [], []
    present = [c for c in CLASSES if sum(r.category == c for r in rows) >= MIN_ROWS]
    for c in CLASSES:
        if c not in present:
            kept.append(f"scales.{c} (under {MIN_ROWS} {c} ops matched in the trace)")
    scales, extra = _linear_fit(rows, present)
    if present:
        fitted += [f"scales.{c}" for c in present] + ["kernel_extra_s"]
    else:
        kept.append("kernel_extra_s (no class has enough matched ops)")
    exponent = _gemm_exponent(rows, extra, scales, fitted, kept)
    op_scales = _op_scales(rows, extra)
    if op_scales:
        fitted.append(f"op_scales ({len(op_scales)} memory-bound ops)")
    layers = _layer_scales(rows, extra)
    if layers:
        fitted.append(f"layer_scales ({len(layers)} ops of {analysis.model})")
    calibration = Calibration(
        data.path,
        analysis.model,
        analysis.spec.id,
        scales,
        exponent,
        op_scales,
        extra,
        layer_scales=layers,
    )
    calibration, overrides = _fit_gaps(analysis, comparison, data, calibration, fitted, kept)
    residuals = _residuals(rows, calibration, analysis)
    notes = _step_spread_notes(data)
    done = dataclasses.replace(
        calibration, fitted=tuple(fitted), kept=tuple(kept), residuals=residuals, notes=notes
    )
    return done, overrides


def _gemm_exponent(rows: list, extra: float, scales: dict, fitted: list, kept: list) -> float:
    """The GEMMs' size exponent, with their scale in `scales`, where enough GEMMs
    span enough FLOPs to fit it; else 0 and the reason in `kept`."""
    points = _size_points([r for r in rows if r.category == "gemm"], extra)
    spread = _decades([flops for flops, _, _ in points])
    fit = _size_fit(points) if len(points) >= 5 and spread >= 1.0 else None
    if fit is not None and _sane(fit[0]):
        scales["gemm"], exponent = fit
        fitted.append("gemm_exponent")
        return exponent
    kept.append(
        f"gemm_exponent ({len(points)} GEMMs spanning {spread:.1f} decades of FLOPs; "
        "5 over a decade are needed)"
    )
    return 0.0


def _layer_scales(rows: list, extra: float) -> dict:
    """Each matched op's own factor, measured less its launches over predicted,
    by its place in the model."""
    layers = {}
    for r in rows:
        core = r.measured_s - extra * max(1, r.kernels)
        if core > 0 and _sane(core / r.predicted_s):
            # a merged row's factor is each of its rows' (the optimizer phase)
            for layer in (r.layer, *(merged for _, merged in r.merged)):
                layers[layer] = core / r.predicted_s
    return layers


def _fit_gaps(analysis, comparison: Comparison, data: TraceData, calibration: Calibration,
              fitted: list, kept: list) -> tuple[Calibration, dict]:  # fmt: skip
    """A GPU trace's gap between kernels queued back to back (an efficiency
    override), or a CPU trace's host time per op (in the calibration)."""
    overrides = {}
    if data.kernels:
        gap = _back_to_back_gap_s(data)
        if gap is None:
            kept.append(f"efficiency.stream_gap_s (under {MIN_GAPS} kernels queued back to back)")
        else:
            overrides["stream_gap_s"] = gap
            fitted.append("efficiency.stream_gap_s")
        kept.append("host_gap_s (a GPU's host overlaps its kernels: the issue model's)")
    else:
        host = _host_gap_s(analysis, calibration, comparison.measured_step_s)
        calibration = dataclasses.replace(calibration, host_gap_s=host)
        fitted.append("host_gap_s")
    return calibration, overrides


def _step_spread_notes(data: TraceData) -> tuple[str, ...]:
    """A note when the trace's profiled steps differ by more than `NOISY_STEPS`
    of their median: the run was disturbed (another process, a drifting
    clock), and every factor fitted from it carries that."""
    spans = [d for _, d in data.step_spans]
    if len(spans) < 2:
        return ()
    median = statistics.median(spans)
    spread = (max(spans) - min(spans)) / median if median > 0 else 0.0
    if spread <= NOISY_STEPS:
        return ()
    return (
        f"the trace's {len(spans)} steps ran {min(spans) / 1e3:.1f} to {max(spans) / 1e3:.1f} "
        f"ms ({spread:.0%} apart): the run was disturbed, and the fit carries it; record "
        "more steps on a quieter machine",
    )


def _linear_fit(rows, classes: list[str]) -> tuple[dict, float]:
    """s_c per class and f (>= 0) minimizing sum (s_c p + f k - m)^2 / m."""
    if not classes:
        return {}, 0.0
    use = [r for r in rows if r.category in classes]
    for with_fixed in (True, False):
        a = np.zeros((len(use), len(classes) + with_fixed))
        b = np.zeros(len(use))
        for i, r in enumerate(use):
            w = 1.0 / math.sqrt(r.measured_s)
            a[i, classes.index(r.category)] = r.predicted_s * w
            if with_fixed:
                a[i, -1] = max(1, r.kernels) * w
            b[i] = r.measured_s * w
        x = np.linalg.lstsq(a, b, rcond=None)[0]
        extra = float(x[-1]) if with_fixed else 0.0
        if extra >= 0 and all(_sane(v) for v in x[: len(classes)]):
            return {c: float(x[j]) for j, c in enumerate(classes)}, extra
    # a degenerate set (every op the same size): the plain ratio of the sums
    out = {}
    for c in classes:
        mine = [r for r in use if r.category == c]
        out[c] = sum(r.measured_s for r in mine) / sum(r.predicted_s for r in mine)
    return out, 0.0


def _decades(values) -> float:
    values = [v for v in values if v > 0]
    return math.log10(max(values) / min(values)) if values else 0.0


def _size_points(gemms, extra: float) -> list[tuple[float, float, float]]:
    """(FLOPs, measured over predicted with the fixed part taken off, measured
    time) of the GEMMs whose time exceeds the fixed part."""
    out = []
    for r in gemms:
        core = r.measured_s - extra * max(1, r.kernels)
        if core > 0 and r.flops > 0 and _sane(core / r.predicted_s):
            out.append((r.flops, core / r.predicted_s, r.measured_s))
    return out


def _size_fit(points) -> tuple[float, float]:
    """(scale at the reference size, exponent) of the GEMMs' ratio in their
    FLOPs, weighted by measured time."""
    x = [math.log(flops / GEMM_REFERENCE_FLOPS) for flops, _, _ in points]
    y = [math.log(ratio) for _, ratio, _ in points]
    w = [math.sqrt(seconds) for _, _, seconds in points]
    slope, intercept = np.polyfit(x, y, 1, w=w)
    if abs(slope) > 1.0:  # clamped: the intercept that best goes with the kept slope
        slope = math.copysign(1.0, slope)
        weights = np.square(w)
        intercept = float(np.sum(weights * (np.array(y) - slope * np.array(x))) / np.sum(weights))
    return math.exp(float(intercept)), float(slope)


def _op_scales(rows, extra: float) -> dict:
    memory = [r for r in rows if r.category == "memory-bound"]
    total = sum(r.measured_s for r in memory)
    by_op = defaultdict(list)
    for r in memory:
        by_op[r.op].append(r)
    out = {}
    for op, mine in by_op.items():
        measured = sum(r.measured_s for r in mine)
        if measured < MIN_OP_SHARE * total:
            continue
        core = measured - extra * sum(max(1, r.kernels) for r in mine)
        predicted = sum(r.predicted_s for r in mine)
        if core > 0 and predicted > 0 and _sane(core / predicted):
            # the rows merged into one (the optimizer phase's) take its factor too
            for name in {op, *(o for r in mine for o, _ in r.merged)}:
                out[name] = core / predicted
    return out


def _host_gap_s(analysis, calibration: Calibration, measured_step_s: float) -> float:
    """A CPU step's time beyond its corrected ops, per kernel."""
    kernels = sum(max(1, r.kernels) for r in analysis.rows)
    layers = row_layer_keys(analysis)
    priced = sum(_corrected(r, calibration, k) for r, k in zip(analysis.rows, layers, strict=True))
    return max(0.0, measured_step_s - priced) / kernels if kernels else 0.0


def _corrected(row, calibration: Calibration, layer: str) -> float:
    return calibration.seconds(
        row.time_s, row_class(row), row.flops, row.kernels, row.op, eager=True, layer=layer
    )


def _residuals(rows, calibration: Calibration, analysis) -> dict:
    """Per class, the matched ops' |corrected - measured| over measured, after
    the fit, by the class and op factors alone: what another model's ops get
    (the traced model's own layers take their own factors)."""
    error, measured = defaultdict(float), defaultdict(float)
    for r in rows:
        corrected = calibration.seconds(
            r.predicted_s, r.category, r.flops, r.kernels, r.op, eager=False
        )
        error[r.category] += abs(corrected - r.measured_s)
        measured[r.category] += r.measured_s
    return {c: error[c] / measured[c] for c in error if measured[c]}


def _back_to_back_gap_s(data: TraceData) -> float | None:
    """The median gap between kernels on one stream whose launch came before
    the previous kernel ended (queued: the gap is the device's, not the host's)."""
    by_stream = defaultdict(list)
    for k in data.kernels:
        by_stream[k.stream].append(k)
    gaps = []
    for kernels in by_stream.values():
        kernels.sort(key=lambda k: k.start_us)
        for prev, nxt in zip(kernels, kernels[1:], strict=False):
            end = prev.start_us + prev.duration_us
            if nxt.launch_us is not None and nxt.launch_us < end and nxt.start_us >= end:
                gaps.append(nxt.start_us - end)
    return statistics.median(gaps) * 1e-6 if len(gaps) >= MIN_GAPS else None
