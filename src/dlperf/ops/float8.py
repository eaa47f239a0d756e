"""Float8 training of linear layers (`--precision fp8`), as torchao's
`convert_to_float8_training` (tensorwise scaling, its default) and Transformer
Engine run it: the GEMMs of linear layers on fp8 Tensor Cores, everything else
as under amp-bf16. Blackwell's block-scaled formats (`--precision mxfp8`,
`nvfp4`; `precision.LinearFormat`) run the same GEMMs and casts, with their
own bytes and passes (below, "Block-scaled formats").

Which GEMMs. A 2-D `mm` or `addmm` on operands of autocast's dtype, recorded
inside a linear layer: a module whose class is named `Linear` or `...Linear`
(nn.Linear and its subclasses, which torchao converts, and look-alikes such as
Transformer Engine's `LayerNormLinear`; not `Bilinear`), or Hugging Face's
`Conv1D` (GPT-2's linear layer, weight stored [in, out]; torchao converts only
nn.Linear, so GPT-2 is priced as if its Conv1D layers were swapped for Linear).
Both feature counts must be multiples of 16: `torch._scaled_mm` needs it, and
torchtitan's float8 filter (components/quantization/utils.py,
`module_filter_fn`) leaves other layers in bf16 (an LM head over GPT-2's 50257
tokens, say). The rule reads class names because a trace records names only.

Roles, from PyTorch's autograd formulas for mm (FunctionsManual.cpp,
`mm_mat1_backward` and `mm_mat2_backward`), for M tokens, `in` and `out` features:
- fprop (any phase but backward; a recompute is a forward again):
  Y[M, out] = X[M, in] W^T, so k = in and n = out.
- wgrad (backward, the left operand a transposed view): dW = dY^T X for
  nn.Linear (weight [out, in]), X^T dY for Conv1D (weight [in, out]); the
  contraction runs over the M tokens.
- dgrad (backward, otherwise): dX[M, in] = dY W, so k = out and n = in.

Casts, as torchao's own float8 roofline counts them (torchao/float8/
roofline_utils.py, `get_tensor_memory_traffic_bytes`, bf16 in, fp8 out) and
as Transformer Engine's current scaling runs them (`Float8CurrentScaling
Quantizer`: compute_amax, then the scale, then cast-transpose): an
activation is read once to find its amax (2 B/element; a two-stage
reduction, 2 kernels) and once more to be written in fp8 in both layouts its
GEMMs take (2 B read, 2 x 1 B written, 1 kernel): Hopper's fp8 Tensor Cores
take K-major operands only, so the backward GEMMs use transposed copies.
Each tensor is cast once and its copies reused (the fp8 input is saved for
backward, the output gradient cast once for both backward GEMMs):
- fprop casts X (e4m3);
- wgrad casts dY (e5m2): every trained linear layer runs a wgrad, while the
  first layer of a network runs no dgrad;
- dgrad casts nothing.
The amax-to-scale arithmetic is a few scalar ops, part of the reduction's
second kernel. Eager torchao runs each cast as several unfused element-wise
kernels; priced here are the fused kernels torch.compile (torchao) and
Transformer Engine's cast-transpose run. A bias is added in the GEMM's
epilogue, as Transformer Engine does.

Activations, as Transformer Engine runs them (`fused_input_casts`): a
tensor several linear layers read (the normed input of q, k and v, of gate
and up) is cast once: Megatron runs them as one fused linear layer
(`linear_qkv`, `linear_fc1`), and torch.compile computes one cast of one
tensor once. An input written by a normalization or an element-wise kernel
has its amax computed by that kernel (TE's current scaling fuses it into the
norm, `FUSED_NORM_AMAX_FP8`, and into the activation,
`FUSED_ACTIVATION_AMAX_FP8`; inductor into the pointwise kernel before):
its cast reads it once (2 B) in one kernel. Autocast's copies of an input to
bf16 are looked through: the tensor is the one they copy. Attention's output
and the output gradients are cast unfused.

Block-scaled formats, as Transformer Engine's MXFP8 and NVFP4 quantizers run
them. A cast writes each layout with its block scales (MXFP8: 1 B per element
and a 1-byte e8m0 scale per 32; NVFP4: half a byte and a 1-byte e4m3 scale per
16). MXFP8 takes each block's scale from the block itself: the cast is one
kernel reading the tensor once, with no amax pass, so no producer has one to
fuse. NVFP4 scales the blocks under one fp32 scale per tensor, from the
tensor's amax: an amax pass as tensorwise fp8 has (TE takes the amaxes of the
row-wise and of the Hadamard-rotated column-wise data in that one pass). The
GEMMs run at the Tensor Cores' rate for the element type (MXFP8 at fp8's,
NVFP4 at fp4's, twice fp8's); all three of fprop, dgrad and wgrad run in the
format. The scales' bytes are counted in the casts; the GEMM model reads the
elements alone (the scales add 3-12% to operands that are read once per
tile, and these GEMMs are math-bound). The 16-point Hadamard transform NVFP4
applies to the wgrad operands is 32 FLOPs per element inside the cast kernel,
not counted.

Weights, as Transformer Engine runs them (`weights_once_per_step`): cast to
fp8 once per optimizer step, not per micro-batch. Megatron keeps fp8
parameters (`fp8_param_gather`, set by Megatron-Bridge's fp8 recipes),
written from the fp32 masters after the optimizer's update; without them,
TE casts on the first micro-batch and reuses the fp8 copy
(`is_first_microbatch`). So per micro-batch there is no weight cast, no
bf16 copy of a weight under autocast (the fp8 weight comes from the fp32
master), and no copy of the weight's gradient to fp32 (the wgrad GEMM
writes the fp32 gradient, Megatron's `gradient_accumulation_fusion`).
Once per step, in the optimizer phase, each fp8 weight is read from its
fp32 master twice (amax 4 B, cast 4 B) and written in both layouts
(2 x 1 B): one cast-transpose kernel per weight and two multi-tensor kernels
(the amaxes, the scales) for all of them. MXFP8 reads the master once (no
amax) and needs no shared kernels.
"""

from __future__ import annotations

from dataclasses import replace

from ..kinds import Category, Phase
from ..precision import TENSORWISE_FP8, LinearFormat
from ..tracing import OpEvent, TensorMeta
from .cost import Cost, CostContext, Costed, Gemm, noted
from .factories import out_bytes
from .linear import CONV1D, activation_operand, is_linear_module

# Per element of a bf16 tensor cast: the amax pass (where the format has one)
# reads 2 B, the cast reads 2 B and writes the two layouts (`cast_bytes`).
BF16_BYTES = 2
# The amax pass's reduction: two stages, two kernels; the cast is one more.
AMAX_KERNELS = 2
# An fp32 master weight element, read by the per-step cast (twice where it has an amax).
MASTER_BYTES = 4
# Two multi-tensor kernels (amaxes, scales) for all weights, where the format has an amax.
WEIGHT_CAST_SHARED_KERNELS = 2
# An fp32 gradient element, as the wgrad GEMM writes it in place of bf16.
FP32_BYTES = 4
# torch._scaled_mm's (and torchtitan's filter's) multiple for the feature counts.
FEATURE_MULTIPLE = 16


def cast_bytes(fmt: LinearFormat) -> tuple[float, float, int]:
    """(bytes read, bytes written, kernels) per element of a bf16 activation cast
    to `fmt` in both layouts its GEMMs take."""
    amax = fmt.amax_pass
    read = BF16_BYTES * (1 + amax)
    return read, 2 * fmt.bytes_per_element, 1 + AMAX_KERNELS * amax


def _transposed(t: TensorMeta) -> bool:
    """A 2-D transposed view of a row-major tensor (column-major strides)."""
    rows, cols = t.shape
    return rows > 1 and t.stride[0] == 1 and (cols == 1 or t.stride[1] == rows)


def gemm_role(e: OpEvent) -> str:
    """fprop, dgrad or wgrad of a linear layer's GEMM (see the module docstring)."""
    if e.phase != "backward":
        return "fprop"
    return "wgrad" if _transposed(e.args[-2]) else "dgrad"


def _features(role: str, a: TensorMeta, b: TensorMeta) -> tuple[int, int]:
    """The layer's two feature counts, from the GEMM's operands a[m, k] b[k, n]."""
    (m, k), n = a.shape, b.shape[1]
    return (m, n) if role == "wgrad" else (k, n)


def runs_fp8(e: OpEvent, ctx: CostContext) -> bool:
    """Whether this mm/addmm runs on fp8 Tensor Cores under the run's policy."""
    policy = ctx.precision
    if not policy.fp8_linear or not is_linear_module(e.module_type):
        return False
    a, b = e.args[-2], e.args[-1]
    if not (isinstance(a, TensorMeta) and isinstance(b, TensorMeta)):
        return False
    if len(a.shape) != 2 or len(b.shape) != 2:
        return False
    # The compute dtype: autocast's, or the weights' own where the run casts
    # them instead (FSDP's mixed precision, `precision.compute_policy`).
    compute = policy.autocast_dtype or policy.param_dtype
    if a.dtype != compute or b.dtype != compute:
        return False
    return all(f % FEATURE_MULTIPLE == 0 for f in _features(gemm_role(e), a, b))


def cast_elements(e: OpEvent, role: str) -> tuple[int, ...]:
    """Element counts of the tensors this GEMM casts to fp8 (one entry each)."""
    a, b = e.args[-2], e.args[-1]
    if role == "fprop":
        return (a.numel,)  # X; W is cast once per step (module docstring)
    if role == "wgrad":
        # dY is the factor whose rows or columns are the out features: the left
        # one (dY^T) for nn.Linear's [out, in] weight, the right one for Conv1D's.
        return (b.numel if e.module_type == CONV1D else a.numel,)
    return ()


def linear_gemm(e: OpEvent, bias_bytes: int = 0, fmt: LinearFormat = TENSORWISE_FP8) -> Costed:
    """The cost of a linear layer's GEMM in `fmt`, with its casts as side work."""
    a, b = e.args[-2], e.args[-1]
    (m, k), n = a.shape, b.shape[1]
    role = gemm_role(e)
    gemm = Gemm(m, n, k, dtype=fmt.gemm_dtype, storage=fmt.gemm_dtype, role=role)
    per_read, per_written, per_kernels = cast_bytes(fmt)
    cast = sum(cast_elements(e, role))
    cast_read, cast_written = per_read * cast, per_written * cast
    casts = len(cast_elements(e, role))
    cost = Cost(
        flops=gemm.flops,
        bytes_read=(a.numel + b.numel) * fmt.bytes_per_element + bias_bytes + cast_read,
        bytes_written=out_bytes(e) + cast_written,
        kernels=1 + per_kernels * casts,
        gemms=(gemm,),
        side_bytes=cast_read + cast_written,
    )
    remark = f"{fmt.name} {role}" + (f" with {casts} {fmt.name} cast(s)" if casts else "")
    return noted(cost, remark)


def _weight_storage(e: OpEvent) -> int | None:
    """The storage a linear layer's GEMM reads its weight from (None if not known)."""
    index = activation_operand(e)
    if index is None or len(e.reads) <= index + 1:
        return None
    return e.reads[index + 1]


_ROLES = ("fprop", "dgrad", "wgrad")


def _fp8_role(found: Costed) -> str:
    """fprop, dgrad or wgrad for a linear layer's low-precision GEMM, else ""."""
    gemms = found.cost.gemms
    low = len(gemms) == 1 and gemms[0].dtype in ("fp8", "fp4") and gemms[0].role in _ROLES
    return gemms[0].role if low else ""


def _is_copy(e: OpEvent, backward: bool) -> bool:
    return e.packet == "aten._to_copy" and (e.phase == Phase.BACKWARD) == backward


def weights_once_per_step(
    priced: list[tuple[OpEvent, Costed]], fmt: LinearFormat = TENSORWISE_FP8
) -> tuple[list[tuple[OpEvent, Costed]], tuple[OpEvent, Costed] | None]:
    """The fp8 weights as Transformer Engine runs them (module docstring):
    each forward's autocast copy of an fp8 weight and each backward's copy of
    its gradient to fp32 cost nothing (the wgrad GEMM writes the fp32
    gradient instead, 2 B more per element), and the weights' casts are one
    optimizer-phase event, returned beside the step (None where no linear
    layer runs fp8)."""
    weights: dict[int, int] = {}  # storage -> elements, per fp8 weight
    grads: set[int] = set()  # storages the fp8 wgrads write
    for event, found in priced:
        role = _fp8_role(found)
        storage = _weight_storage(event)
        if role == "fprop" and storage is not None:
            weights[storage] = event.args[-1].numel
        elif role == "wgrad" and event.writes:
            grads.add(event.writes[0])
    copied = {e.reads[0] for e, _ in priced if _is_copy(e, True) and e.reads} & grads
    out = []
    for event, found in priced:
        if _is_copy(event, False) and event.writes and event.writes[0] in weights:
            found = _free(found, "fp8 weight: no bf16 copy (cast once per step)")
        elif _is_copy(event, True) and event.reads and event.reads[0] in copied:
            found = _free(found, "fp8 weight gradient: written in fp32 by its wgrad")
        elif _fp8_role(found) == "wgrad" and event.writes and event.writes[0] in copied:
            out_meta = event.outputs[0]
            extra = (FP32_BYTES - out_meta.itemsize) * out_meta.numel
            found = found._replace(
                cost=replace(found.cost, bytes_written=found.cost.bytes_written + extra)
            )
        out.append((event, found))
    if not weights:
        return out, None
    elements = sum(weights.values())
    step = OpEvent(op="fp8.weight_cast", args=(), kwargs={}, outputs=(), module="(optimizer)",
                   phase=Phase.OPTIMIZER, info={"weights": len(weights)})  # fmt: skip
    cost = Cost(
        bytes_read=MASTER_BYTES * (1 + fmt.amax_pass) * elements,
        bytes_written=2 * fmt.bytes_per_element * elements,
        kernels=WEIGHT_CAST_SHARED_KERNELS * fmt.amax_pass + len(weights),
    )
    remark = f"{len(weights)} {fmt.name} weights cast from their fp32 masters, once per step"
    return out, (step, Costed(cost, Category.OTHER, "movement", (remark,)))


def _free(found: Costed, remark: str) -> Costed:
    return Costed(Cost(kernels=0), found.category, found.family, (remark,))


def fused_input_casts(
    priced: list[tuple[OpEvent, Costed]], fmt: LinearFormat = TENSORWISE_FP8
) -> list[tuple[OpEvent, Costed]]:
    """Each fp8 fprop's input cast as Transformer Engine runs it (module
    docstring): none where an earlier fprop of the same pass cast the same
    tensor, and no amax pass where a normalization or element-wise op wrote it."""
    source: dict[int, int] = {}  # an autocast copy's storage -> the storage it copies
    producer: dict[int, Costed] = {}  # storage -> the cost of the op that last wrote it
    cast: set[tuple[str, int]] = set()  # (phase, storage) of the inputs cast so far
    out = []
    for event, found in priced:
        index = activation_operand(event)
        if _fp8_role(found) == "fprop" and index is not None and len(event.reads) > index:
            root = event.reads[index]
            while root in source:
                root = source[root]
            n = event.args[-2].numel
            read, written, kernels = cast_bytes(fmt)
            if (event.phase, root) in cast:
                found = _less(found, read * n, written * n, kernels,
                              "input cast shared with an earlier layer")  # fmt: skip
            elif fmt.amax_pass and root in producer and producer[root].category in _AMAX_PRODUCERS:
                found = _less(found, BF16_BYTES * n, 0, AMAX_KERNELS,
                              "input amax fused into its producer")  # fmt: skip
            cast.add((event.phase, root))
        if _is_copy(event, False) and event.reads and event.writes:
            source[event.writes[0]] = event.reads[0]
        for storage in event.writes:
            producer[storage] = found
        out.append((event, found))
    return out


_AMAX_PRODUCERS = (Category.NORMALIZATION, Category.ELEMENTWISE)


def _less(found: Costed, read: float, written: float, kernels: int, remark: str) -> Costed:
    """`found` without a cast's `read` and `written` bytes and `kernels`."""
    cost = replace(
        found.cost,
        bytes_read=found.cost.bytes_read - read,
        bytes_written=found.cost.bytes_written - written,
        side_bytes=found.cost.side_bytes - read - written,
        kernels=found.cost.kernels - kernels,
    )
    return found._replace(cost=cost, remarks=(*found.remarks, remark))
