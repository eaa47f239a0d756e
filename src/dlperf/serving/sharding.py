"""Tensor parallelism of a traced step: what one of `tp` GPUs runs (Megatron-LM's
scheme, which FasterTransformer, TensorRT-LLM and vLLM serve with).

The rule follows the data through the step's storage ids (each event's
`reads` and `writes`), so it needs no knowledge of the architecture:

- A linear layer's GEMM that reads a replicated activation is column-parallel:
  each GPU computes n/tp of its output features (its weight's columns), and
  that output is sharded (the heads of attention, the MLP's hidden units).
- A linear layer's GEMM that reads a sharded activation is row-parallel: each
  GPU reduces over its k/tp input features and holds a partial sum of the
  full output; an all-reduce of that output (b x tokens x n elements)
  follows, on the critical path, and the output is replicated again.
- Any other op that reads a sharded tensor runs on its shard: its FLOPs and
  bytes are 1/tp of the traced op's (attention over heads/tp query and
  key/value heads, the activation function, rotary embeddings, the KV cache
  writes); its outputs are sharded. Ops on replicated tensors only (norms,
  residual adds, embeddings) run whole on every GPU.
- A mixture-of-experts layer (`dlperf::moe`) is sharded as Megatron-LM and
  vLLM's tensor-parallel MoE run it: every GPU holds all experts with F/tp of
  each expert's FFN, so the first grouped GEMM computes its g F/tp columns,
  the second reduces over F/tp and leaves a partial sum of the layer's output,
  all-reduced after it. Weights, FLOPs and the activation's bytes shrink by
  tp; the token permutes do not.
- A column-parallel output that no row-parallel layer consumes (the LM head's
  logits over the vocabulary) is all-gathered at the end of the step, as
  FasterTransformer gathers logits before sampling.

For a standard transformer block this gives the two all-reduces per layer of
Megatron-LM (after attention's output projection and after the MLP). Heads
that do not divide by tp (grouped-query attention with fewer KV heads than
GPUs) are replicated: a GPU keeps ceil(kv_heads / tp) of them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..ops.cost import Cost, Costed
from ..ops.linear import activation_operand
from ..tracing import OpEvent
from ..tracing.moe import MOE_OP
from .quant import kv_cache_bytes


@dataclass(frozen=True)
class Collective:
    """A collective the step waits for, placed after the op at `after`."""

    kind: str  # "all_reduce" or "all_gather"
    nbytes: float  # the full buffer (every GPU's result)
    after: int  # index in the priced ops


def shard(priced: list, tp: int) -> tuple[list, list[Collective], set[int]]:
    """The priced ops one GPU of `tp` runs, the collectives between them, and
    the storages a GPU holds 1/tp of (the sharded activations)."""
    if tp <= 1:
        return list(priced), [], set()
    # each sharded storage -> the column-parallel ops whose outputs flowed into it
    origin: dict[int, frozenset[int]] = {}
    columns: dict[int, float] = {}  # op index -> its full output bytes
    reduced: set[int] = set()  # column ops whose results a row-parallel op reduced
    sharded: set[int] = set()
    out, collectives = [], []
    for i, (event, found) in enumerate(priced):
        operand = activation_operand(event)
        cost = found.cost
        flowing = frozenset().union(*(origin[s] for s in event.reads if s in origin))
        if event.op == MOE_OP:
            cost = _experts_parallel(cost, tp)
            # the layer's output alone: the op's other outputs are what it keeps for
            # backward (`tracing.moe`), never reduced
            collectives.append(Collective("all_reduce", float(event.outputs[0].nbytes), i))
            _forget(origin, event.writes)
        elif operand is not None and len(cost.gemms) == 1 and event.reads[operand] in origin:
            cost = _row_parallel(event, cost, tp)
            collectives.append(Collective("all_reduce", _out_bytes(event), i))
            reduced |= flowing
            _forget(origin, event.writes)
        elif operand is not None and len(cost.gemms) == 1:
            cost = _column_parallel(event, cost, tp)
            columns[i] = _out_bytes(event)
            origin.update((sid, frozenset({i})) for sid in event.writes)
        elif flowing or any(s in origin for s in event.reads):
            cost = _split(cost, tp)
            origin.update((sid, flowing) for sid in event.writes)
        else:
            _forget(origin, event.writes)
        out.append((event, found if cost is found.cost else Costed(cost, *found[1:])))
        sharded.update(sid for sid in event.writes if sid in origin)
    for i in sorted(set(columns) - reduced):
        collectives.append(Collective("all_gather", columns[i], i))
    return out, collectives, sharded


def _forget(origin: dict, ids) -> None:
    for sid in ids:
        origin.pop(sid, None)


def _out_bytes(event: OpEvent) -> float:
    return float(sum(t.nbytes for t in event.outputs))


def _linear_bytes(event: OpEvent) -> tuple[float, float, float, float]:
    """(activation, weight, bias, output) bytes of a linear layer's mm/addmm."""
    args = [a for a in event.args if hasattr(a, "nbytes")]
    bias = args[0].nbytes if event.packet == "aten.addmm" else 0
    a, b = args[-2].nbytes, args[-1].nbytes
    return float(a), float(b), float(bias), _out_bytes(event)


def _column_parallel(event: OpEvent, cost: Cost, tp: int) -> Cost:
    """n/tp output features: weight, bias and output shrink, the input does not."""
    g = cost.gemms[0]
    n = math.ceil(g.n / tp)
    a, b, bias, c = _linear_bytes(event)
    share = n / g.n
    return dataclasses.replace(
        cost,
        flops=cost.flops * share,
        bytes_read=a + (b + bias) * share,
        bytes_written=c * share,
        gemms=(dataclasses.replace(g, n=n),),
    )


def _row_parallel(event: OpEvent, cost: Cost, tp: int) -> Cost:
    """k/tp input features: input and weight shrink, the output (a partial sum) does not."""
    g = cost.gemms[0]
    k = math.ceil(g.k / tp)
    a, b, bias, c = _linear_bytes(event)
    share = k / g.k
    return dataclasses.replace(
        cost,
        flops=cost.flops * share,
        bytes_read=(a + b) * share + bias,
        bytes_written=c,
        gemms=(dataclasses.replace(g, k=k),),
    )


def _experts_parallel(cost: Cost, tp: int) -> Cost:
    """Each GPU's share of a mixture-of-experts layer: F/tp of every expert."""

    def shard_gemm(g):
        if g.role.startswith("expert fc1"):
            return dataclasses.replace(g, n=math.ceil(g.n / tp), tensor_bytes=g.tensor_bytes / tp)
        return dataclasses.replace(g, k=math.ceil(g.k / tp), tensor_bytes=g.tensor_bytes / tp)

    moved = cost.bytes_read - cost.side_bytes  # the experts' weights and their inputs
    return dataclasses.replace(
        cost,
        flops=cost.flops / tp,
        bytes_read=moved / tp + cost.side_bytes,
        gemms=tuple(shard_gemm(g) for g in cost.gemms),
    )


def _split(cost: Cost, tp: int) -> Cost:
    """An op on a shard: 1/tp of everything (GEMM batches over heads, attention heads)."""
    gemms = tuple(
        dataclasses.replace(g, batch=math.ceil(g.batch / tp), tensor_bytes=g.tensor_bytes / tp)
        for g in cost.gemms
    )
    attention = tuple(_attention_shard(a, tp) for a in cost.attention)
    return dataclasses.replace(
        cost,
        flops=cost.flops / tp,
        bytes_read=cost.bytes_read / tp,
        bytes_written=cost.bytes_written / tp,
        side_bytes=cost.side_bytes / tp,
        gemms=gemms,
        attention=attention,
    )


def _attention_shard(shape, tp: int):
    """An attention call on heads/tp query heads and ceil(kv_heads/tp) key/value heads."""
    heads, kv_heads = math.ceil(shape.heads / tp), math.ceil(shape.kv_heads / tp)
    kv = kv_cache_bytes(shape)
    moved = (shape.bytes - kv) * heads / shape.heads + kv * kv_heads / shape.kv_heads
    return dataclasses.replace(shape, heads=heads, kv_heads=kv_heads, bytes=moved)
