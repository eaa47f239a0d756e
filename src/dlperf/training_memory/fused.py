"""What a step saves for backward when its layers run as Megatron-Core with
Transformer Engine runs them (`--kernels te`), from the eager trace.

The model's own code saves what each of its PyTorch ops needs; TE's and
Megatron's fused kernels save less:

- a norm (TE's fused LayerNorm/RMSNorm, or the norm fused into the next
  linear layer, `LayerNormLinear`) keeps its input in the input's dtype and
  one fp32 statistic per row (rstd; LayerNorm's mean too), and recomputes the
  rest in backward. Hugging Face's RMSNorm saves an fp32 copy of its input
  and the normalised values before the weight besides: both are dropped, and
  the input is kept. The normalised output the next linear layer reads is
  that layer's saved input, as before.
- a gated activation (Megatron's fused bias-SwiGLU, TE's `swiglu`) keeps its
  two inputs, the gate and up projections' outputs, and recomputes the
  activation of the gate in backward: the activation's output that the
  product saves (silu(gate), for the up projection's gradient) is dropped.
  An activation output a linear layer saves (GELU before fc2) is its input
  and stays.
- under fp8 (`Precision.fp8_linear`), a block's linear layer keeps its input as the
  fp8 cast its GEMM read (TE saves the quantized input for the weight
  gradient: 1 byte an element), not in the compute dtype; where another op
  saves the same tensor (attention saves its output, the output projection's
  input) that op's copy stays and the fp8 copy is added. The routed experts'
  grouped GEMMs (`dlperf::moe`, TE's `GroupedLinear`) do the same: the
  permuted tokens fc1 reads and the activation fc2 reads are kept in fp8;
  fc1's output, the weighted SwiGLU's input, stays in the compute dtype.

- the fused attention's Q, K and V are contiguous tensors of their own
  (Megatron-Core calls `.contiguous()` on each before the kernel): a Q, K or
  V that the model's code passes as a view of a larger tensor keeps only its
  own elements. DeepSeek-V3's value in the Hugging Face code is a slice of
  the key-value up-projection's output, (k_nope, v) per head: saving the view
  held the whole output, 4096 x 128 x (128 + 128) x 2 B = 256 MiB a layer at
  4,096 tokens, where Megatron keeps v alone, 128 MiB.

Everything else (the attention core's output and statistics, the loss) is
saved as traced.
"""

from __future__ import annotations

import dataclasses

from ..checkpointing import attention_cores
from ..dtypes import bytes_per_element
from ..ops.linear import activation_operand, is_linear_module
from ..tracing import Trace, within
from ..tracing.events import SavedTensor
from ..tracing.moe import MOE_OP

# The activation ops a fused gated-MLP kernel recomputes from its input.
GATE_ACTIVATIONS = ("aten.silu", "aten.gelu")


def is_norm_module(module_type: str) -> bool:
    """Whether a module class name is a layer norm or an RMSNorm."""
    return module_type.endswith(("LayerNorm", "RMSNorm"))


def _producers(trace: Trace) -> dict[int, object]:
    """The forward event that wrote each storage first."""
    found: dict[int, object] = {}
    for e in trace.events:
        if e.phase != "forward":
            continue
        for sid in e.writes:
            found.setdefault(sid, e)
    return found


def _norm_inputs(trace: Trace) -> dict[str, tuple[int, int]]:
    """Per norm module: (its input's storage, bytes), from its first forward op."""
    found: dict[str, tuple[int, int]] = {}
    types = trace.module_types
    for e in trace.events:
        if e.phase != "forward" or not e.reads:
            continue
        norm = next((m for m in _ancestors(e.module) if is_norm_module(types.get(m, ""))), None)
        if norm is None or norm in found:
            continue
        found[norm] = (e.reads[0], trace.module_inputs.get(norm, 0))
    return found


def _ancestors(path: str):
    while path:
        yield path
        path = path.rpartition(".")[0]


def te_saved(trace: Trace) -> Trace:
    """`trace` with the saved set of Megatron-Core and Transformer Engine
    (module docstring)."""
    if not trace.training:
        return trace
    types = trace.module_types
    producers = _producers(trace)
    norms = _norm_inputs(trace)
    linear_inputs: set[int] = set()
    # the blocks' linear layers (Megatron's output layer is not TE's)
    if trace.precision.fp8_linear:
        for e in trace.events:
            at = activation_operand(e) if e.phase == "forward" else None
            if at is not None and any(within(e.module, b) for b in trace.blocks):
                linear_inputs.add(e.reads[at])
    # the experts' own GEMM inputs: the op is the GEMM, its saved copy becomes the fp8 one
    expert_inputs = _expert_gemm_inputs(trace) if trace.precision.fp8_linear else set()
    linear_inputs |= expert_inputs
    views = _attention_view_bytes(trace)
    kept: list[SavedTensor] = []
    seen: set[int] = set()
    for t in trace.saved:
        if t.kind != "activation":
            kept.append(t)
            continue
        if t.storage in views and views[t.storage] < t.nbytes:
            t = dataclasses.replace(t, nbytes=views[t.storage])  # made contiguous
        owner = next((m for m in _ancestors(t.module) if m in norms), None)
        if owner is not None and t.nbytes > _row_bytes(trace, owner):
            continue  # a norm's own copies: it keeps its input and statistics
        made = producers.get(t.storage)
        linear = is_linear_module(types.get(t.module, ""))
        if made is not None and made.op.startswith(GATE_ACTIVATIONS) and not linear:
            continue  # a fused gated activation recomputes it from its input
        if t.storage in linear_inputs:
            itemsize = _itemsize(made, t.storage)
            stored = trace.precision.linear_format.bytes_per_element
            cast = dataclasses.replace(t, nbytes=int(t.nbytes * stored / itemsize))
            if linear or t.storage in expert_inputs:
                t = cast
            else:
                kept.append(cast)  # the linear layer's own fp8 copy beside this one
        kept.append(t)
        seen.add(t.storage)
    for norm, (storage, nbytes) in norms.items():
        if storage not in seen and nbytes:
            kept.append(SavedTensor(norm, nbytes, "activation", storage))
            seen.add(storage)
    return dataclasses.replace(trace, saved=kept)


def _attention_view_bytes(trace: Trace) -> dict[int, int]:
    """Per storage a fused attention kernel reads Q, K or V from, the bytes of
    those tensors themselves (each distinct view once): what stays saved once
    they are made contiguous (module docstring). The ops that build Q, K and V
    from a projection's output (splits, views, rotary products by a constant
    table, concatenations) save none of it: the kernel's views were the only
    hold on the rest."""
    events = trace.events
    own: dict[int, dict[tuple, int]] = {}
    for core in attention_cores(trace):
        if len(core) != 1:
            continue  # eager attention: its batched GEMMs save their own operands
        e = events[core[0]]
        for sid, t in zip(e.reads[:3], e.tensors()[:3], strict=False):
            own.setdefault(sid, {})[(t.shape, t.stride, t.offset)] = t.numel * t.itemsize
    return {sid: sum(views.values()) for sid, views in own.items()}


def _expert_gemm_inputs(trace: Trace) -> set[int]:
    """The storages of the tensors the experts' grouped GEMMs read, as each
    `dlperf::moe` call writes them (`tracing.moe.moe`'s outputs: the permuted
    tokens fc1 reads, second, and the activation fc2 reads, fourth)."""
    found: set[int] = set()
    for e in trace.events:
        if e.phase == "forward" and e.op == MOE_OP and len(e.writes) >= 4:
            found |= {e.writes[1], e.writes[3]}
    return found


def _row_bytes(trace: Trace, norm: str) -> int:
    """The bytes of one fp32 statistic per row of a norm's input (its rstd):
    what the norm keeps beside its input. Anything larger is a copy."""
    calls = trace.module_calls.get(norm) or []
    shape = calls[0][0][0].shape if calls and calls[0] and calls[0][0] else ()
    if not shape:
        return 0
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows * 4


def _itemsize(event, storage: int) -> int:
    """Bytes per element of the tensor `event` wrote to `storage` (2: bf16)."""
    if event is None:
        return 2
    for sid, out in zip(event.writes, event.outputs, strict=False):
        if sid == storage:
            return out.itemsize
    return bytes_per_element("bf16")
