"""Recurrent layers mapped to GEMMs by Table 1 of NVIDIA's Optimizing Recurrent Layers guide.

For each layer (and direction), with gates G = 4 (LSTM), 3 (GRU) or 1
(ReLU/tanh RNN), hidden size H, minibatch B, sequence S, and the layer's
input size I (the previous layer's output):

| path           | phase               | M     | N     | K     | GEMMs |
| recurrent      | forward             | G x H | B     | H     | S     |
| recurrent      | activation gradient | H     | B     | G x H | S     |
| recurrent      | weight gradient     | H     | G x H | B x S | 1     |
| layer-to-layer | forward             | G x H | B x S | I     | 1     |
| layer-to-layer | activation gradient | I     | B x S | G x H | 1     |
| layer-to-layer | weight gradient     | I     | G x H | B x S | 1     |

The unrolling factor is taken as S (the whole sequence in one layer-to-layer
GEMM). The first layer's input gradient is skipped when the input needs none.
The row also says whether cuDNN's persistent kernel could run the layer
(Optimizing Recurrent Layers, chapter 5): fp16 only, weights small enough to
stay on chip (hidden size up to 1024 for LSTM), and small minibatches.

Where it can run, the persistent kernel changes the price of the recurrent
path (the S dependent GEMMs of the forward and activation-gradient passes):
it is launched once for the whole sequence and keeps the recurrent weights on
chip, so it pays one launch, not S, and reads the weights from memory once;
every step still runs its GEMM after the previous one, moving only that
step's activations.
"""

from __future__ import annotations

import torch

from ..kinds import Category
from ..tracing import OpEvent
from .cost import CostContext, Costed, Gemm, noted
from .factories import contraction, make_gemm
from .registry import register

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# Largest hidden size whose recurrent weights cuDNN keeps on chip, per unit
# (Optimizing Recurrent Layers, chapter 5: LSTM up to 1024; GRU and plain units
# have fewer gates, so their weights of the same footprint allow proportionally
# larger hidden sizes).
PERSISTENT_MAX_HIDDEN = {"LSTM": 1024, "GRU": 1182, "RNN_TANH": 2048, "RNN_RELU": 2048}
# From this minibatch on the standard kernels are as fast (Optimizing Recurrent
# Layers, figure 10).
PERSISTENT_MAX_BATCH = 256
# Element-wise work per gate value per step: activation, the cell update.
GATE_FLOPS = 5


def persistence(info: dict, dtype: str) -> tuple[bool, str]:
    """Could cuDNN's persistent kernel run this layer, and if not, why."""
    mode, hidden, batch = info["mode"], info["hidden_size"], info["batch"]
    if dtype != "fp16":
        return False, f"persistent RNN kernels need fp16 (this layer runs {dtype})"
    limit = PERSISTENT_MAX_HIDDEN[mode]
    if hidden > limit:
        return False, f"hidden size {hidden} is above the persistent limit {limit}"
    if batch >= PERSISTENT_MAX_BATCH:
        return False, f"minibatch {batch} is large: standard kernels are as fast"
    return True, "eligible for cuDNN's persistent kernel"


def rnn_gemms(
    info: dict, phase: str, ctx: CostContext, dtype: torch.dtype, persistent: bool = False
) -> list[Gemm]:
    """The GEMMs of Table 1 for a layer run on tensors of `dtype`."""
    gates = GATES[info["mode"]]
    hidden = info["hidden_size"]
    out_size = info.get("proj_size") or hidden
    batch, seq = info["batch"], info["seq"]
    directions = 2 if info["bidirectional"] else 1
    item = dtype.itemsize
    gemms = []

    def add(m, n, k, count, role):
        gemms.append(make_gemm(ctx, dtype, m, n, k, count=count * directions, role=role))

    def recurrent(m, n, k, role):
        if not persistent:
            add(m, n, k, seq, role)
            return
        # one launch per direction runs the S steps; the M x K weights stay on chip after one read
        moved = (m * k + seq * (k * n + m * n)) * item * directions
        gemms.append(
            make_gemm(ctx, dtype, m, n, k, count=seq * directions, role=role,
                      tensor_bytes=moved, launches=directions)
        )  # fmt: skip

    for layer in range(info["num_layers"]):
        size_in = info["input_size"] if layer == 0 else out_size * directions
        if phase != "backward":  # forward, or its recompute under checkpointing
            recurrent(gates * hidden, batch, out_size, "recurrent forward")
            add(gates * hidden, batch * seq, size_in, 1, "layer-to-layer forward")
        else:
            recurrent(out_size, batch, gates * hidden, "recurrent activation gradient")
            add(out_size, gates * hidden, batch * seq, 1, "recurrent weight gradient")
            if layer > 0 or info["input_requires_grad"]:
                add(size_in, batch * seq, gates * hidden, 1, "layer-to-layer activation gradient")
            add(size_in, gates * hidden, batch * seq, 1, "layer-to-layer weight gradient")
    return gemms


def recurrent(e: OpEvent, ctx: CostContext) -> Costed:
    info = e.info
    x = e.args[0]
    # Autocast runs cuDNN's RNN in half precision whatever the input's dtype.
    run_dtype = ctx.precision.autocast_dtype or x.dtype
    ok, why = persistence(info, ctx.precision.contraction_dtype(run_dtype))
    gemms = rnn_gemms(info, e.phase, ctx, run_dtype, persistent=ok)
    item = x.itemsize
    directions = 2 if info["bidirectional"] else 1
    hidden, batch, seq = info["hidden_size"], info["batch"], info["seq"]
    gates = GATES[info["mode"]]
    # Gate pre-activations are written once and read once per layer and step.
    gate_bytes = 2 * info["num_layers"] * directions * seq * batch * gates * hidden * item
    gate_flops = GATE_FLOPS * info["num_layers"] * directions * seq * batch * gates * hidden
    # weights are read once per launch (a persistent launch covers every step)
    weights = sum(g.m * g.k * item * (g.launches or g.count) for g in gemms)
    read = x.nbytes + weights + gate_bytes / 2
    written = seq * batch * hidden * directions * item * info["num_layers"] + gate_bytes / 2
    cost = contraction(gemms, read, written, extra_flops=gate_flops, kernels=len(gemms))
    return noted(cost, f"persistent: {why}" if ok else f"standard kernel: {why}")


for _mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
    register(f"dlperf.rnn.{_mode}", category=Category.CONTRACTION, family="rnn")(recurrent)
