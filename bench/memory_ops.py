"""Measured memory-bound ops (element-wise, softmax, layer norm, GELU) from
../shared/data, predicted through `dlperf.analyze` on one-op modules.

Shapes are traced once each (the trace does not depend on the GPU) and
analysed for every GPU that measured them. Groups are source x GPU x dtype x
op; as for GEMMs, eager-call sources get their harness floor added.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dlperf.analysis import analyze_trace
from dlperf.hardware import gpu
from dlperf.tracing import trace
from sources import DATA

FILES = {
    "neusight": [
        "neusight_train/elementwise.csv",
        "neusight_train/softmax.csv",
        "neusight_train/layernorm.csv",
    ],
    "llmcompass": ["llmcompass/softmax.csv", "llmcompass/layernorm.csv", "llmcompass/gelu.csv"],
}
SHAPES_PER_OP = 250
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Binary(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, y):
        return self.fn(x, y)


class Unary(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


_BINARY = {"add": torch.add, "mul": torch.mul, "div": torch.div, "pow": torch.pow}
_UNARY = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "gelu": nn.functional.gelu,
    "addu": lambda x: x + 2.0,
    "mulu": lambda x: x * 2.0,
    "divu": lambda x: x / 2.0,
    "powu": lambda x: x**2.0,
}


def one_op(op: str, extra: dict, m: int, n: int, dtype: str):
    """(module, inputs) that run the measured op on meta tensors of its shape."""
    x = torch.empty(m, n, dtype=TORCH_DTYPES[dtype], device="meta")
    if extra.get("fn") == "torch.compile(F.gelu)":  # 1-D tensor of m elements
        x = torch.empty(m, dtype=TORCH_DTYPES[dtype], device="meta")
        return Unary(lambda t: nn.functional.gelu(t, approximate="tanh")), x
    if op in _BINARY and extra.get("operand") != "scalar":
        return Binary(_BINARY[op]), (x, x)
    if op in _BINARY:
        return Unary(_UNARY[op + "u"]), x
    if op in _UNARY:
        return Unary(_UNARY[op]), x
    if op == "softmax":
        return Unary(lambda t: torch.softmax(t, dim=-1)), x
    if op == "layernorm":
        if extra.get("affine") == "0":
            return Unary(lambda t: nn.functional.layer_norm(t, (n,))), x
        return nn.LayerNorm(n, device="meta", dtype=x.dtype), x
    raise KeyError(op)


@dataclass
class OpGroup:
    source: str
    gpu: str
    dtype: str
    op: str
    keys: list  # shape key per row
    time_s: np.ndarray

    @property
    def key(self) -> str:
        return f"{self.source} {self.gpu} {self.dtype} {self.op}"

    @property
    def timing(self) -> str:
        return "eager"


def load_groups(seed: int = 0) -> tuple[list[OpGroup], dict]:
    """Groups of measured rows and the distinct (op, extra, m, n, dtype) they need."""
    rng = np.random.default_rng(seed)
    rows = defaultdict(list)
    for source, files in FILES.items():
        for name in files:
            with open(DATA / name) as f:
                for r in csv.DictReader(f):
                    extra = dict(i.split("=", 1) for i in r["extra"].split(";") if "=" in i)
                    op = r["op"] + (" (scalar)" if extra.get("operand") == "scalar" else "")
                    shape = (op, r["extra"], int(r["m"]), int(r["n"] or 1), r["dtype"])
                    rows[(source, r["gpu"], r["dtype"], op)].append((shape, float(r["time_s"])))
    shapes_by_op = defaultdict(set)
    for (source, _, _, op), items in rows.items():
        shapes_by_op[(source, op)].update(s for s, _ in items)
    chosen = {}
    for key, shapes in shapes_by_op.items():
        shapes = sorted(shapes)
        if len(shapes) > SHAPES_PER_OP:
            pick = rng.choice(len(shapes), SHAPES_PER_OP, replace=False)
            shapes = [shapes[i] for i in sorted(pick)]
        chosen[key] = set(shapes)
    groups = []
    for (source, gpu_id, dtype, op), items in sorted(rows.items()):
        keep = [(s, t) for s, t in items if s in chosen[(source, op)]]
        groups.append(
            OpGroup(source, gpu_id, dtype, op, [s for s, _ in keep], np.array([t for _, t in keep]))
        )
    needed = {s for g in groups for s in g.keys}
    return groups, needed


def trace_shapes(needed) -> dict:
    traces = {}
    for shape in needed:
        op, extra_text, m, n, dtype = shape
        extra = dict(i.split("=", 1) for i in extra_text.split(";") if "=" in i)
        module, inputs = one_op(op.split(" ")[0], extra, m, n, dtype)
        traces[shape] = trace(module, inputs, training=False, precision="fp32")
    return traces


def predict(groups: list[OpGroup], traces: dict, spec_for=gpu) -> list[np.ndarray]:
    """Predicted kernel time per row, per group."""
    out = []
    cache = {}
    for g in groups:
        spec = spec_for(g.gpu)
        times = []
        for shape in g.keys:
            key = (shape, g.gpu)
            if key not in cache:
                cache[key] = analyze_trace(traces[shape], spec, optimizer="").time_s
            times.append(cache[key])
        out.append(np.array(times))
    return out
