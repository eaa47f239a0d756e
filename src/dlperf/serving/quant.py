"""Inference precisions: how weights, activations and the KV cache are stored
and which Tensor Core path the linear layers' GEMMs take.

The model is traced in its base dtype (fp16 or bf16); a precision is then a
re-pricing of the traced ops, stated here once:

- Which GEMMs: the `mm`/`addmm` of linear layers (`ops.linear.is_linear_module`:
  nn.Linear and look-alikes, HF's Conv1D) inside the model's repeated blocks,
  i.e. the GEMMs whose B operand is a weight. Embeddings and the LM head stay
  in the base dtype, as AWQ, GPTQ, SmoothQuant and TensorRT-LLM leave them by
  default.
- What changes on them: the weight's bytes (plus its scales), the bytes of
  the activation operand, and the math dtype; FLOPs do not. Their output is
  written in the base dtype (dequantized in the epilogue).
- fp8 (e4m3 weights and activations, fp8 GEMMs) needs fp8 Tensor Cores
  (Hopper, Ada, Blackwell); int8 is SmoothQuant W8A8 (int8 GEMMs, int32
  accumulation). Activations are quantized in the epilogue of the kernel that
  produced them (TensorRT-LLM fuses it into the norm and activation kernels),
  so the GEMM reads 1 B per element and no extra pass is priced.
- int8-weight / int4-weight: weight-only quantization, weights read at 1 or
  0.5 B plus their group's scale (and, for int4, zero point) along the input
  features (`quant_group`, default 128: AWQ/GPTQ's usual size), dequantized in
  registers into fp16 GEMMs (`kernels.quantized`): the math is fp16 and
  unchanged, the weight traffic shrinks, the dequantization adds CUDA-core
  work. With fewer than 5 tokens the kernel is TensorRT-LLM's CUDA-core
  batched GEMV, which streams the weights and dequantizes them in turn.
- The KV cache (`kv_cache_dtype`): keys and values stored at 2 or 1 B; the
  attention over the cache reads them at that size, the step writes its new
  tokens at that size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torch import nn

from ..dtypes import bytes_per_element
from ..errors import DlperfError
from ..hardware import HardwareSpec
from ..kernels.quantized import (
    DEFAULT_GROUP,
    GEMV_BELOW_TOKENS,
    GEMV_ROLE,
    bytes_per_weight,
)
from ..ops.cost import Cost, Gemm
from ..ops.linear import CONV1D, is_linear_gemm, is_linear_module
from ..precision import resolve_for
from ..tracing import OpEvent, within
from ..tracing.moe import MOE_OP, moe_replacements

MIN_GROUP = 16  # weights per scale: the smallest group kernels take (a half-warp's loads)


@dataclass(frozen=True)
class Scheme:
    name: str
    base: str  # the dtype the model is traced in, and everything else runs in
    weight_bytes: float  # per element of a quantized linear weight, scales included
    activation_bytes: int  # per element of the activation operand of those GEMMs
    gemm_dtype: str  # their math dtype ("base" until resolved)
    needs: str = ""  # a math dtype the GPU must have
    what: str = ""
    weight_bits: int = 0  # weight-only quantization: 4 or 8 (0: none)
    group: int = 0  # weights per scale group of weight-only quantization

    def quantized(self) -> bool:
        return self.weight_bytes != bytes_per_element(self.base) or self.gemm_dtype != self.base


def _weight_only(bits: int, group: int) -> Scheme:
    zero = ", a scale and a zero" if bits == 4 else ", a scale"
    return Scheme(
        f"int{bits}-weight",
        "fp16",
        bytes_per_weight(bits, group),
        2,
        "fp16",
        what=f"int{bits} weights{zero} per {group}, fp16 math",
        weight_bits=bits,
        group=group,
    )


SCHEMES = {
    "fp16": Scheme("fp16", "fp16", 2, 2, "fp16", what="fp16 weights and math"),
    "bf16": Scheme("bf16", "bf16", 2, 2, "bf16", what="bf16 weights and math"),
    "fp8": Scheme("fp8", "bf16", 1, 1, "fp8", "fp8", "fp8 (e4m3) weights and activations"),
    "int8": Scheme("int8", "fp16", 1, 1, "int8", "int8", "SmoothQuant W8A8 int8 GEMMs"),
    "int8-weight": _weight_only(8, DEFAULT_GROUP),
    "int4-weight": _weight_only(4, DEFAULT_GROUP),
}
KV_CACHE_DTYPES = ("fp16", "bf16", "fp8", "int8")


def scheme_for(name: str, spec: HardwareSpec, group: int | None = None) -> Scheme:
    """The precision `name` on `spec`, refused in one line where the GPU lacks its
    math; `group` sets the weights per scale of weight-only precisions."""
    key = str(name).lower()
    if key not in SCHEMES:
        raise DlperfError(f"unknown serving precision {name!r}; choose from: {', '.join(SCHEMES)}")
    scheme = SCHEMES[key]
    if group is not None:
        if not scheme.weight_bits:
            raise DlperfError(
                f"--quant-group applies to int8-weight and int4-weight, not {scheme.name}"
            )
        whole = isinstance(group, int) and not isinstance(group, bool)
        if not whole or group < MIN_GROUP or group & (group - 1):
            raise DlperfError(
                f"--quant-group {group} must be a power of two from {MIN_GROUP}, like 32 or 128"
            )
        scheme = _weight_only(scheme.weight_bits, group)
    if scheme.needs == "fp8" and not spec.has_dtype("fp8"):
        raise DlperfError(
            f"{spec.id} has no fp8 Tensor Cores (fp8 needs Hopper, Ada or Blackwell); "
            "use --precision int8 or int8-weight (or fp16)"
        )
    if scheme.needs and not spec.has_dtype(scheme.needs):
        raise DlperfError(f"{spec.id} has no {scheme.needs} Tensor Core math; use --precision fp16")
    if scheme.base == "bf16" and not spec.has_dtype("bf16") and key == "fp8":
        scheme = dataclasses.replace(scheme, base="fp16")
    if not spec.has_dtype(scheme.base):  # a serving precision names a serving fallback
        other = next((d for d in ("bf16", "fp16") if spec.has_dtype(d)), None)
        hint = f"use --precision {other}" if other else "it serves no 16-bit precision"
        raise DlperfError(f"{spec.id} has no {scheme.base} math; {hint}")
    resolve_for(spec, scheme.base)
    return scheme


def kv_dtype_for(name: str | None, scheme: Scheme) -> str:
    """The KV cache's dtype: `name`, or the base dtype when not given."""
    if name is None:
        return scheme.base
    key = str(name).lower()
    if key not in KV_CACHE_DTYPES:
        raise DlperfError(
            f"unknown --kv-cache-dtype {name!r}; choose from: {', '.join(KV_CACHE_DTYPES)}"
        )
    return key


def is_block_linear(event: OpEvent, blocks: list[str]) -> bool:
    """A linear layer's GEMM inside a repeated block: one whose B operand is a weight."""
    if not is_linear_gemm(event):
        return False
    return any(within(event.module, b) for b in blocks)


def linear_cost(gemm: Gemm, has_bias: bool, scheme: Scheme, out_bytes: int) -> Cost:
    """A linear layer's GEMM under `scheme`: A[m,k] activations, B[k,n] weights,
    C[m,n] written in the base dtype, a bias of n read once in the epilogue."""
    m, n, k = gemm.m, gemm.n, gemm.k
    a = m * k * scheme.activation_bytes
    b = k * n * scheme.weight_bytes
    bias = n * bytes_per_element(scheme.base) if has_bias else 0
    c = m * n * out_bytes
    storage = scheme.gemm_dtype if scheme.activation_bytes == 1 else scheme.base
    new = dataclasses.replace(
        gemm,
        dtype=scheme.gemm_dtype,
        storage=storage,
        tensor_bytes=(a + b + c) * gemm.count,
        role=GEMV_ROLE if _gemv(scheme, m) else quantized_role(scheme),
        weight_bits=scheme.weight_bits,
        quant_group=scheme.group,
    )
    return Cost(flops=gemm.flops, bytes_read=a + b + bias, bytes_written=c, gemms=(new,))


def _gemv(scheme: Scheme, tokens: int) -> bool:
    return scheme.activation_bytes > 1 and scheme.quantized() and tokens < GEMV_BELOW_TOKENS


def quantized_role(scheme: Scheme) -> str:
    """The role a re-priced linear GEMM carries: its weights' precision."""
    return f"{scheme.name} weights"


def experts_cost(cost: Cost, scheme: Scheme) -> Cost:
    """A mixture-of-experts layer under `scheme`: its grouped GEMMs read the
    experts' weights at the quantized size (scales included) and run in the
    scheme's GEMM dtype; the routing, permutes and activations stay as traced."""
    saved = 0.0
    gemms = []
    for g in cost.gemms:
        base = bytes_per_element(g.storage)
        weights = g.k * g.n * g.batch  # per call: B[k, n] of each expert in the group
        saved += weights * g.count * (base - scheme.weight_bytes)
        storage = scheme.gemm_dtype if scheme.activation_bytes == 1 else g.storage
        # what one call moves: the routed rows in and out, the experts' weights as stored
        rows = g.m * g.batch
        moved = rows * g.k * scheme.activation_bytes + weights * scheme.weight_bytes
        moved += rows * g.n * base
        gemms.append(
            dataclasses.replace(
                g,
                dtype=scheme.gemm_dtype,
                storage=storage,
                tensor_bytes=moved * g.count,
                weight_bits=scheme.weight_bits,
                quant_group=scheme.group,
            )
        )
    return dataclasses.replace(cost, bytes_read=cost.bytes_read - saved, gemms=tuple(gemms))


def quantize(priced: list, scheme: Scheme, kv_dtype: str, blocks: list[str]) -> list:
    """The priced ops of a step, re-priced for `scheme` and the KV cache's dtype."""
    base_bytes = bytes_per_element(scheme.base)
    kv_ratio = bytes_per_element(kv_dtype) / base_bytes
    cache_ids = _cache_storages(priced) if kv_ratio != 1 else set()
    out = []
    for event, found in priced:
        cost = found.cost
        if scheme.quantized() and is_block_linear(event, blocks) and len(cost.gemms) == 1:
            cost = linear_cost(cost.gemms[0], event.packet == "aten.addmm", scheme, base_bytes)
        elif scheme.quantized() and event.op == MOE_OP:
            cost = experts_cost(cost, scheme)
        elif kv_ratio != 1:
            cost = _kv_repriced(event, cost, cache_ids, kv_ratio)
        out.append((event, found if cost is found.cost else found._replace(cost=cost)))
    return out


def kv_cache_bytes(shape) -> float:
    """Bytes of the keys and values an attention call reads (its forward)."""
    per = bytes_per_element(shape.dtype)
    elements = shape.batch * shape.kv_heads * shape.kv_len * (shape.head_dim + shape.value_dim)
    return float(elements * per)


def _cache_storages(priced: list) -> set[int]:
    """Storage ids of the KV cache: the keys and values attention reads."""
    ids = set()
    for event, found in priced:
        if found.cost.attention and len(event.reads) >= 3:
            ids.update(event.reads[1:3])
    return ids


def _kv_repriced(event: OpEvent, cost: Cost, cache_ids: set[int], ratio: float) -> Cost:
    """Attention reading the cache, or a copy writing new tokens into it, at
    the cache's dtype (`ratio` of the base dtype's bytes)."""
    if cost.attention:
        shapes = tuple(
            dataclasses.replace(a, bytes=a.bytes - kv_cache_bytes(a) * (1 - ratio))
            for a in cost.attention
        )
        saved = sum(a.bytes for a in cost.attention) - sum(a.bytes for a in shapes)
        return dataclasses.replace(cost, bytes_read=cost.bytes_read - saved, attention=shapes)
    if event.writes and set(event.writes) <= cache_ids:
        return dataclasses.replace(cost, bytes_written=cost.bytes_written * ratio)
    return cost


def weight_bytes(module, blocks: list[str], scheme: Scheme) -> float:
    """Bytes of the model's parameters under `scheme`: linear weights inside
    the blocks at the quantized size (scales included), the rest at the base
    dtype's. Shared parameters (a tied LM head) count once."""
    quantized = set()
    for path, sub in module.named_modules():
        if is_linear_module(type(sub).__name__) and any(within(path, b) for b in blocks):
            weight = getattr(sub, "weight", None)
            if weight is not None:
                quantized.add(id(weight))
    for moe in moe_replacements(module):  # the experts' matrices, stacked or a list
        experts = moe.experts if isinstance(getattr(moe, "experts", None), nn.Module) else moe
        quantized.update(id(p) for p in experts.parameters() if p.dim() >= 2)
    base = bytes_per_element(scheme.base)
    total = 0.0
    for p in module.parameters():
        total += p.numel() * (scheme.weight_bytes if id(p) in quantized else base)
    return total


def check_group(module, blocks: list[str], scheme: Scheme) -> None:
    """Refuse a scale group that does not split the quantized layers' rows:
    each row of input features holds whole groups (AWQ's and GPTQ's layout)."""
    if not scheme.group:
        return
    for path, sub in module.named_modules():
        weight = getattr(sub, "weight", None)
        if weight is None or not is_linear_module(type(sub).__name__):
            continue
        if not any(within(path, b) for b in blocks):
            continue
        rows = weight.shape[0] if type(sub).__name__ == CONV1D else weight.shape[-1]
        if rows % scheme.group:
            fits = max(g for g in (16, 32, 64, 128) if rows % g == 0) if rows % 16 == 0 else None
            hint = f", like {fits}" if fits else ""
            raise DlperfError(
                f"--quant-group {scheme.group} does not split the {rows} input features of "
                f"{path} into whole groups: give a group that divides {rows}{hint}"
            )


def linear_note(scheme: Scheme) -> str:
    return f"{scheme.name}: {scheme.what}; linear layers in the blocks re-priced"


__all__ = [
    "KV_CACHE_DTYPES",
    "SCHEMES",
    "Scheme",
    "check_group",
    "is_block_linear",
    "kv_dtype_for",
    "linear_cost",
    "quantize",
    "scheme_for",
    "weight_bytes",
]
