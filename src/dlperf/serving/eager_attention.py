"""Attention as serving engines run it, whatever the model's own code does.

vLLM, SGLang, TensorRT-LLM and FasterTransformer never run a Hugging Face
class's eager attention: they compute attention with their own fused kernels
(FlashAttention, FlashInfer, their paged-attention kernels) reading the
cache in its dtype. A class without an SDPA path (GPT-J, CodeGen ...) is
traced as it computes in eager mode: a batched GEMM of the queries and the
transposed keys, scaling, the mask, a softmax (often in fp32, after casting
q and k, the whole cache included, to fp32) and a second batched GEMM with
the values.

`fuse_eager_attention` finds that chain in a trace by following the data
(each event's storage reads and writes), and replaces it with one
`dlperf.attention` event, as a traced `scaled_dot_product_attention` is
recorded, so it is priced as the fused kernel the engine would pick:

- the chain starts at a batched GEMM (`bmm`) whose result alone feeds a run
  of point-wise ops (scale, mask add, casts, dropout) that contains a
  softmax, and whose end is the first operand of a second `bmm`;
- the casts whose only reader is the first GEMM (q and k to fp32) go too:
  the fused kernel reads q and k as they were;
- the mask tensor is dropped: engines apply the causal mask inside the
  kernel (causal when a step has more than one new token).

Anything that does not match the chain exactly is left as traced.

`engine_masks` does the same for attention the model already runs fused
(`scaled_dot_product_attention`) with a mask of its own: an engine runs its
causal kernel on the cache whatever mask the Hugging Face class builds
(Falcon's, for one), so `--attention flash` prices that kernel rather than
refusing a mask the engine never passes.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import torch

from ..tracing import OpEvent, TensorMeta, Trace

ATTENTION_OP = "dlperf.attention.default"
_GEMM = frozenset({"aten.bmm"})
_SOFTMAX = frozenset({"aten._softmax", "aten.softmax", "aten._safe_softmax"})
# what may stand between the two GEMMs beside the softmax
_BETWEEN = frozenset(
    {
        "aten.div",
        "aten.mul",
        "aten.add",
        "aten.sub",
        "aten.masked_fill",
        "aten.where",
        "aten._to_copy",
        "aten.clone",
        "aten.native_dropout",
        "aten.dropout",
    }
)


def fuse_eager_attention(trace: Trace, requested: str = "auto") -> Trace:
    """`trace` with each eager attention chain as one fused attention event
    (the module docstring); the trace itself when it has none."""
    events = trace.events
    readers: dict[int, list[int]] = defaultdict(list)
    producer: dict[int, int] = {}
    for i, e in enumerate(events):
        for sid in set(e.reads):
            readers[sid].append(i)
        for sid in e.writes:
            producer[sid] = i
    fresh = 1 + max((sid for e in events for sid in (*e.reads, *e.writes)), default=0)
    replaced: dict[int, OpEvent | None] = {}
    for i, e in enumerate(events):
        if e.packet in _GEMM and i not in replaced:
            found = _chain(events, readers, i)
            if found is not None:
                chain, last = found
                drop = chain + _casts_into(events, readers, producer, i)
                if not any(j in replaced for j in drop):
                    replaced.update(dict.fromkeys(drop))
                    replaced[last] = _fused_event(events, chain, last, producer, requested, fresh)
                    fresh += 1
    if not replaced:
        return trace
    kept = [replaced.get(i, e) for i, e in enumerate(events)]
    return dataclasses.replace(trace, events=[e for e in kept if e is not None])


def engine_masks(trace: Trace) -> Trace:
    """`trace` with every fused attention call as an engine runs it: no mask
    tensor (its read dropped), causal when the step has more than one new
    token (aligned to the last key, as the cost model aligns it)."""
    events = list(trace.events)
    changed = False
    for i, e in enumerate(events):
        if e.op != ATTENTION_OP or len(e.args) < 6:
            continue
        mask = e.args[3]
        if mask is None and e.args[5] == (e.args[0].shape[2] > 1):
            continue
        args = list(e.args)
        args[3], args[5] = None, args[0].shape[2] > 1
        reads = e.reads
        if isinstance(mask, TensorMeta) and len(reads) == len(e.tensors()):
            reads = reads[:3] + reads[4:]  # q, k, v, then the mask: drop its read
        events[i] = dataclasses.replace(e, args=tuple(args), reads=reads)
        changed = True
    return dataclasses.replace(trace, events=events) if changed else trace


def _chain(events: list[OpEvent], readers, first: int) -> tuple[list[int], int] | None:
    """(the events from the scores GEMM up to the softmax's consumer, excluded,
    and the second GEMM's index), or None when `first` starts no attention."""
    chain, current, softmax = [first], events[first].writes, False
    while len(current) == 1:
        after = [j for j in readers[current[0]] if j > chain[-1]]
        if len(after) != 1:
            return None
        j = after[0]
        e = events[j]
        if e.packet in _GEMM:
            return (chain, j) if softmax and e.reads[:1] == current else None
        if e.packet not in _BETWEEN | _SOFTMAX:
            return None
        softmax |= e.packet in _SOFTMAX
        chain.append(j)
        current = e.writes[:1]
    return None


def _casts_into(events, readers, producer, gemm: int) -> list[int]:
    """The dtype casts whose only reader is the scores GEMM (q, k to fp32)."""
    out = []
    for sid in events[gemm].reads[:2]:
        j = producer.get(sid)
        if j is not None and events[j].packet == "aten._to_copy" and readers[sid] == [gemm]:
            out.append(j)
    return out


def _source(events, producer, gemm: int, operand: int) -> tuple[TensorMeta, int]:
    """(the tensor a GEMM operand was cast from, its storage), or the operand."""
    e = events[gemm]
    sid, meta = e.reads[operand], e.tensors()[operand]
    j = producer.get(sid)
    if j is not None and events[j].packet == "aten._to_copy":
        cast = events[j]
        return dataclasses.replace(meta, dtype=cast.tensors()[0].dtype), cast.reads[0]
    return meta, sid


def _fused_event(events, chain: list[int], last: int, producer, requested: str,
                 lse_storage: int) -> OpEvent:  # fmt: skip
    """The fused attention call the chain from `chain[0]` to `last` stands for;
    its log-sum-exp output gets the new storage `lse_storage`."""
    scores, values = events[chain[0]], events[last]
    (q3, q_sid), (kt3, k_sid) = (_source(events, producer, chain[0], n) for n in (0, 1))
    v3, v_sid = values.tensors()[1], values.reads[1]
    groups, lq, d = q3.shape
    s, dv = kt3.shape[2], v3.shape[2]
    batch = _batch_of(events, chain, groups, lq)
    heads = groups // batch
    q = _meta((batch, heads, lq, d), q3.dtype)
    k = _meta((batch, heads, s, d), kt3.dtype)
    v = _meta((batch, heads, s, dv), v3.dtype)
    out = _meta((batch, heads, lq, dv), v3.dtype)
    lse = _meta((batch, heads, lq), torch.float32)
    causal = lq > 1
    return OpEvent(
        op=ATTENTION_OP,
        args=(q, k, v, None, 0.0, causal, None, False, requested, False),
        kwargs={},
        outputs=(out, lse),
        module=scores.module,
        phase=scores.phase,
        module_type=scores.module_type,
        reads=(q_sid, k_sid, v_sid),
        writes=(values.writes[0], lse_storage),
    )


def _batch_of(events, chain: list[int], groups: int, lq: int) -> int:
    """The batch of a (batch x heads) GEMM batch, read off the first 4-d
    scores tensor of the chain (1 when the chain never shows one)."""
    for j in chain:
        for t in events[j].outputs:
            if len(t.shape) == 4 and t.shape[2] == lq and t.shape[0] * t.shape[1] == groups:
                return t.shape[0]
    return 1


def _meta(shape: tuple[int, ...], dtype: torch.dtype) -> TensorMeta:
    stride, step = [], 1
    for size in reversed(shape):
        stride.append(step)
        step *= size
    return TensorMeta(tuple(shape), dtype, tuple(reversed(stride)))
