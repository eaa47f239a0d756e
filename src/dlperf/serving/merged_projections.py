"""The projections a serving engine runs as one GEMM, and its fused gated activation.

vLLM loads the linear layers that read the same activations as one weight
(`QKVParallelLinear`: q, k and v; `MergedColumnParallelLinear`: an MLP's
gate and up) and runs them as one GEMM over their columns together; its
`SiluAndMul` then reads that GEMM's [gate | up] output once and writes
silu(gate) x up in one kernel. A Hugging Face module computes each
projection apart, so a trace holds three (or two) GEMMs that each read the
same input, and a SiLU and a product as two kernels.

`merge_projections` prices them as the engine runs them: the linear GEMMs
of one module that read the same input storage, before anything writes it
again, become one GEMM of n = the sum of their columns (the input read once,
every weight and output as before, one launch), at the place of the first;
and a SiLU whose output only the next op, a product, reads is one kernel
with it. Nothing else changes: the FLOPs are the same, and so are the bytes
but the input's repeated reads and the SiLU's output written and read back.
"""

from __future__ import annotations

import dataclasses

from ..costs import Cost, Gemm
from ..dtypes import bytes_per_element
from ..ops.linear import activation_operand
from ..tracing.events import TensorMeta

# How far past a projection its siblings may be traced: an MLP's up projection
# comes after the gate's activation (gate, silu, up), q, k and v one after another.
LOOKAHEAD = 4


def merge_projections(priced: list) -> list:
    """`priced` ((event, costed) pairs) with the engine's merged projections
    and gated activation (module docstring)."""
    merged, taken = [], set()
    for i, (event, found) in enumerate(priced):
        if i in taken:
            continue
        siblings = _siblings(priced, i)
        if siblings:
            taken.update(siblings)
            group = [priced[j] for j in (i, *siblings)]
            event, found = _one_gemm(group)
        merged.append((event, found))
    return _gated_activations(merged)


def _gemm(event, found) -> Gemm | None:
    """The one GEMM of a linear layer's op, else None."""
    gemms = found.cost.gemms
    if activation_operand(event) is None or len(gemms) != 1 or found.cost.attention:
        return None
    return gemms[0]


def _parent(module: str) -> str:
    return module.rsplit(".", 1)[0] if "." in module else ""


def _siblings(priced: list, i: int) -> list[int]:
    """The later projections that read what projection i reads, in one module."""
    event, found = priced[i]
    first = _gemm(event, found)
    if first is None:
        return []
    source = event.reads[activation_operand(event)]
    found_at = []
    for j in range(i + 1, min(len(priced), i + 1 + LOOKAHEAD)):
        other, costed = priced[j]
        if source in other.writes:
            break
        gemm = _gemm(other, costed)
        if (
            gemm is not None
            and other.reads[activation_operand(other)] == source
            and _parent(other.module) == _parent(event.module)
            and (gemm.m, gemm.k, gemm.batch, gemm.dtype, gemm.storage, gemm.weight_bits)
            == (first.m, first.k, first.batch, first.dtype, first.storage, first.weight_bits)
        ):
            found_at.append(j)
    return found_at


def _one_gemm(group: list):
    """One GEMM for the group's projections, labelled with their module."""
    (event, found), gemms = group[0], [f.cost.gemms[0] for _, f in group]
    first = gemms[0]
    gemm = dataclasses.replace(
        first,
        n=sum(g.n for g in gemms),
        tensor_bytes=sum(g.tensor_bytes for g in gemms),
    )
    reread = (len(group) - 1) * first.m * first.k * first.batch * bytes_per_element(first.storage)
    costs = [f.cost for _, f in group]
    cost = Cost(
        flops=sum(c.flops for c in costs),
        bytes_read=sum(c.bytes_read for c in costs) - reread,
        bytes_written=sum(c.bytes_written for c in costs),
        kernels=1,
        gemms=(gemm,),
        side_bytes=sum(c.side_bytes for c in costs),
    )
    names = "+".join(e.module.rsplit(".", 1)[-1] for e, _ in group)
    merged = dataclasses.replace(
        event,
        args=_wider_args(event, gemm.n),
        outputs=tuple(_columns(t, gemm.n) for t in event.outputs),
        module=_parent(event.module),
        writes=tuple(w for e, _ in group for w in e.writes),
        info={**event.info, "merged": names},
    )
    remark = f"{names} as one GEMM of {gemm.n} columns, as the engine loads them"
    return merged, found._replace(cost=cost, remarks=(*found.remarks, remark))


def _columns(t: TensorMeta, n: int) -> TensorMeta:
    """`t` (a weight [k, n'], a bias [n'] or an output [m, n']) with n columns."""
    shape = (*t.shape[:-1], n)
    if len(shape) == 2 and t.stride[0] == 1:  # a transposed weight, as linear passes it
        return TensorMeta(shape, t.dtype, (1, shape[0]))
    stride, size = [], 1
    for dim in reversed(shape):
        stride.insert(0, size)
        size *= dim
    return TensorMeta(shape, t.dtype, tuple(stride))


def _wider_args(event, n: int) -> tuple:
    """The GEMM's arguments with its weight (and bias) of n columns: the merged
    layer's, so that what reads its tensors (tensor parallelism's shards, the
    report's shapes) sees the GEMM that runs."""
    operand = activation_operand(event)
    out, tensors = [], 0
    for arg in event.args:
        if isinstance(arg, TensorMeta):
            arg = arg if tensors == operand else _columns(arg, n)
            tensors += 1
        out.append(arg)
    return tuple(out)


def _gated_activations(priced: list) -> list:
    """A SiLU followed by the product that alone reads it: one kernel."""
    out, i = [], 0
    while i < len(priced):
        event, found = priced[i]
        following = priced[i + 1] if i + 1 < len(priced) else None
        if (
            following is not None
            and event.packet == "aten.silu"
            and following[0].packet == "aten.mul"
            and event.writes
            and event.writes[0] in following[0].reads
            and not _read_later(priced, i + 2, event.writes[0])
        ):
            out.append(_silu_and_mul(event, found, *following))
            i += 2
            continue
        out.append((event, found))
        i += 1
    return out


def _read_later(priced: list, start: int, storage: int) -> bool:
    return any(storage in e.reads for e, _ in priced[start:])


def _silu_and_mul(silu, silu_costed, product, product_costed):
    """One kernel: the gate read (the SiLU's input), the up half read, the product
    written; the SiLU's own output never reaches memory."""
    a, b = silu_costed.cost, product_costed.cost
    inner = a.bytes_written  # written by the SiLU and read back by the product
    cost = Cost(
        flops=a.flops + b.flops,
        bytes_read=a.bytes_read + b.bytes_read - inner,
        bytes_written=b.bytes_written,
        kernels=1,
    )
    event = dataclasses.replace(
        product,
        op="fused: silu+mul (SiluAndMul)",
        reads=silu.reads + product.reads,
        info={**product.info, "merged": "silu_and_mul"},
    )
    return event, product_costed._replace(cost=cost, remarks=("silu(gate) x up in one kernel",))
