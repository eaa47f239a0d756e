"""`dlperf sweep`: predicted curves that redraw the guides' figures.

Each sweep writes NAME.csv (the numbers) and NAME.svg (the chart) into the
output folder, for any GPU of the catalogue.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..errors import DlperfError
from ..hardware import gpu as get_gpu
from ..kernels.gemm import gemm
from ..kernels.gemm_tiles import TILES, predict_many
from ..kernels.pricing import on_chip_bytes, time
from ..kernels.roofline import streaming_time_s
from ..ops.cost import Cost, CostContext
from ..ops.rnn import persistence, rnn_gemms
from ..precision import precision
from .charts import figure, svg

SWEEPS = {}


def sweep(name: str, title: str, default_gpu: str):
    def decorate(fn):
        SWEEPS[name] = (fn, title, default_gpu)
        return fn

    return decorate


@sweep("gemm-k-alignment", "GEMM time for K = 1008..1024 (fp16, M = N = 1024)", "v100")
def k_alignment(spec):
    ks = list(range(1008, 1025))
    times = [gemm(1024, 1024, k, "fp16", spec).time_s * 1e3 for k in ks]
    return {"K": ks, "time_ms": times}, ("K", ["time_ms"], "duration (ms)", False)


@sweep("gemm-tiles", "GEMM throughput vs size for each thread-block tile (fp16)", "a100")
def tiles(spec):
    sizes = np.arange(256, 8192 + 1, 128)
    out = {"size": sizes.tolist()}
    for tile in TILES[:8]:
        r = predict_many(
            sizes,
            sizes,
            np.full_like(sizes, 4096),
            np.ones_like(sizes),
            spec,
            "fp16",
            tile_shapes=(tile,),
            split_factors=(1,),
        )
        out[f"{tile[0]}x{tile[1]}"] = (2.0 * sizes * sizes * 4096 / r.time_s / 1e12).tolist()
    return out, ("size", [k for k in out if k != "size"], "TFLOP/s (M = N = size, K = 4096)", False)


@sweep("linear-batch", "linear layer 4096 x 1024 throughput vs batch size (fp16)", "v100")
def linear_batch(spec):
    batches = [2**i for i in range(0, 14)]
    results = [gemm(b, 4096, 1024, "fp16", spec) for b in batches]
    return (
        {
            "batch": batches,
            "tflops": [r.achieved_flops_per_s / 1e12 for r in results],
            "bound": [r.bound for r in results],
        },
        ("batch", ["tflops"], "TFLOP/s", True),
    )


def _norm_time(spec, elements: np.ndarray, passes: float, itemsize: int = 2):
    return streaming_time_s(elements * itemsize * (passes + 1), spec) * 1e6


@sweep("batchnorm", "batch norm forward duration vs input size: persistent vs multi-pass", "a100")
def batchnorm(spec):
    elements = np.logspace(3, 9, 40)
    capacity = on_chip_bytes(spec) / 2
    persistent = np.where(elements <= capacity, _norm_time(spec, elements, 1), np.nan)
    return (
        {
            "elements": elements.tolist(),
            "persistent_us": persistent.tolist(),
            "multi_pass_us": _norm_time(spec, elements, 2).tolist(),
        },
        ("elements", ["persistent_us", "multi_pass_us"], "duration (us), fp16", True),
    )


@sweep("activation", "activation forward/backward duration vs N*H*W*C (fp16)", "a100")
def activation(spec):
    elements = np.logspace(3, 9, 40)
    forward = streaming_time_s(elements * 2 * 2, spec) * 1e6  # read x, write y
    backward = streaming_time_s(elements * 2 * 3, spec) * 1e6  # read dy and y, write dx
    return (
        {
            "elements": elements.tolist(),
            "forward_us": forward.tolist(),
            "backward_us": backward.tolist(),
        },
        ("elements", ["forward_us", "backward_us"], "duration (us)", True),
    )


@sweep("pooling", "pooling duration per element vs N*H*W*C (3x3 max pool, stride 2, fp16)", "a100")
def pooling(spec):
    elements = np.logspace(3, 9, 40)
    forward = streaming_time_s(elements * 2 * (1 + 0.25 + 0.25 * 4), spec)  # x, y, indices
    backward = streaming_time_s(elements * 2 * (1 + 0.25 + 0.25 * 4), spec)
    return (
        {
            "elements": elements.tolist(),
            "forward_ns_per_element": (forward / elements * 1e9).tolist(),
            "backward_ns_per_element": (backward / elements * 1e9).tolist(),
        },
        ("elements", ["forward_ns_per_element", "backward_ns_per_element"], "ns per element", True),
    )


# The sequence length of the recurrent-layers guide's persistence study (GNMT).
LSTM_SEQ = 256


def _lstm_step(spec, hidden: int, batch: int, persistent: bool) -> float:
    """Microseconds per step of one LSTM layer's recurrent forward path (fp16),
    priced as the analysis prices it: the standard kernels launch one GEMM per
    step and read the weights each time; the persistent kernel launches once
    for the sequence and keeps them on chip. NaN where cuDNN would not run the
    persistent kernel (the guide's limits on hidden size and minibatch)."""
    import torch


    info = {
        "mode": "LSTM",
        "hidden_size": hidden,
        "batch": batch,
        "seq": LSTM_SEQ,
        "num_layers": 1,
        "input_size": hidden,
        "bidirectional": False,
    }
    if persistent and not persistence(info, "fp16")[0]:
        return float("nan")
    ctx = CostContext(precision("fp16"))
    gemms = rnn_gemms(info, "forward", ctx, torch.float16, persistent=persistent)
    recurrent = tuple(g for g in gemms if g.role == "recurrent forward")
    return time(Cost(gemms=recurrent), spec, "fp16").seconds / LSTM_SEQ * 1e6


@sweep(
    "lstm",
    f"LSTM recurrent step vs hidden size (batch 64, sequence {LSTM_SEQ}), standard vs persistent",
    "a100",
)
def lstm(spec):
    hiddens = [128, 256, 512, 768, 1024, 1536, 2048, 4096]
    out = {
        "hidden": hiddens,
        "standard_us": [_lstm_step(spec, h, 64, False) for h in hiddens],
        "persistent_us": [_lstm_step(spec, h, 64, True) for h in hiddens],
    }
    return out, ("hidden", ["standard_us", "persistent_us"], "duration per step (us)", True)


@sweep(
    "lstm-minibatch",
    f"LSTM recurrent step vs minibatch (hidden 1024, sequence {LSTM_SEQ}), standard vs persistent",
    "a100",
)
def lstm_minibatch(spec):
    batches = [8, 16, 32, 64, 128, 256, 512]
    return (
        {
            "minibatch": batches,
            "standard_us": [_lstm_step(spec, 1024, b, False) for b in batches],
            "persistent_us": [_lstm_step(spec, 1024, b, True) for b in batches],
        },
        ("minibatch", ["standard_us", "persistent_us"], "duration per step (us)", True),
    )


def sweeps_document() -> dict:
    """The sweeps there are (`dlperf sweep --list`)."""
    listed = [{"name": n, "title": t, "default_gpu": g} for n, (_, t, g) in SWEEPS.items()]
    return {"sweeps": listed}


def sweep_names(name: str) -> list[str]:
    """The sweeps `name` stands for: one, or every one for "all"."""
    if name == "all":
        return list(SWEEPS)
    if name not in SWEEPS:
        raise _unknown(name)
    return [name]


def _unknown(name: str) -> DlperfError:
    return DlperfError(f"unknown sweep {name!r}; see `dlperf sweep --list`")


def run_sweep(name: str, gpu: str | None, out_dir: str) -> list[str]:
    if name not in SWEEPS:
        raise _unknown(name)
    fn, title, default = SWEEPS[name]
    spec = get_gpu(gpu or default)
    data, (x, ys, ylabel, logx) = fn(spec)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"{name}.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(list(data))
        writer.writerows(zip(*data.values(), strict=True))

    fig, ax = figure(7, 4)
    for y in ys:
        ax.plot(data[x], data[y], marker=".", label=y)
    if logx:
        ax.set_xscale("log")
    if name in ("batchnorm", "activation"):
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} - {spec.id}", fontsize=9)
    ax.legend(fontsize=7)
    svg_path = folder / f"{name}.svg"
    svg_path.write_text(svg(fig))
    return [str(csv_path), str(svg_path)]
