"""Mixture-of-experts layers: the experts of one layer call as a grouped-GEMM
MoE runs them (`tracing.moe` records them as `dlperf::moe` events).

With T tokens, top-k routing, E experts of FFN size F (gated SwiGLU experts
have a gate and an up matrix, g = 2; plain ones g = 1) and hidden size H,
S = T x k token-expert pairs pass through the experts. Which expert gets
which token is the router's, known only at run time: the price assumes a
balanced router, S / E rows per expert (the remainder one more row to as
many experts). Each projection is one grouped GEMM over the experts, priced
as a batched GEMM of E equal problems (one launch, the experts' tiles
sharing the waves), as grouped-GEMM MoE kernels (Megatron-Core's, PyTorch's
`_grouped_mm`) run equal groups.

| phase    | GEMM         | M       | N     | K       | batch |
| forward  | fc1          | S / E   | g F   | H       | E     |
| forward  | fc2          | S / E   | H     | F       | E     |
| backward | fc2 dgrad    | S / E   | F     | H       | E     |
| backward | fc2 wgrad    | H       | F     | S / E   | E     |
| backward | fc1 dgrad    | S / E   | H     | g F     | E     |
| backward | fc1 wgrad    | g F     | H     | S / E   | E     |

so forward does 2 S H F (g + 1) FLOPs in GEMMs (SwiGLU: 2 T k 3 H F) and
backward twice that (the weight gradients only when the experts train).
Each wgrad sums into its gradient buffer in place, reading and writing it
every micro-batch (`summed_gradient_bytes`).
Under an fp8, MXFP8 or NVFP4 training recipe the grouped GEMMs run in its
format, as Transformer Engine's GroupedLinear runs them, and each pass casts
the two inputs its GEMMs read (`cast_inputs`). Around them run memory-bound
kernels, streamed after the GEMMs: forward
the permute (a gather of S rows of H), the activation (reads g F, writes F
per row) and the unpermute (S rows scaled by their routing weight and
summed into T rows); backward their gradients (the unpermute's gather of
the output gradient and the routing weights' dot products, the
activation's, the permute's scatter-add). Their launches are not timed
(the GEMM pricing streams side bytes only): a few microseconds per layer
call. The router runs
before the op as the model's own code (a linear map, softmax, top-k),
recorded and priced as those ops.
"""

from __future__ import annotations

from dataclasses import replace

from ..kinds import Category
from ..precision import LinearFormat
from ..tracing import OpEvent
from ..tracing.moe import MOE_BACKWARD_OP, MOE_OP, MoeShape, moe_shape
from .cost import CostContext, Costed, Gemm, noted
from .factories import contraction, make_gemm
from .float8 import FEATURE_MULTIPLE, cast_bytes
from .registry import register

_MOE = {"category": Category.CONTRACTION, "family": "moe"}
# FLOPs per activation element (ops/elementwise.py's counts): SwiGLU is silu
# (5) times up (1); a plain expert's GELU 8. Backward, SwiGLU recomputes silu
# (5), takes its gradient (silu_backward, 6) and two products (2); GELU's
# gradient (gelu_backward) is 10.
ACTIVATION_FLOPS = {True: 6, False: 8}
ACTIVATION_BACKWARD_FLOPS = {True: 13, False: 10}
ROUTING_INDEX_BYTES = 8  # int64 expert ids, one per routed row
# Kernels around the grouped GEMMs: forward the routing's sort, count and
# scan, the permute, the activation and the unpermute; backward the
# unpermute's gradient, the activation's and the permute's.
FORWARD_SIDE_KERNELS = 6
BACKWARD_SIDE_KERNELS = 3


def _inner(s: MoeShape) -> int:
    """Columns of the first GEMM: gate and up for gated experts (2F), else F."""
    return s.ffn * (2 if s.gated else 1)


def expert_format(s: MoeShape, ctx: CostContext) -> LinearFormat | None:
    """The low-precision format the experts' grouped GEMMs run in under an fp8,
    MXFP8 or NVFP4 training recipe (Transformer Engine's GroupedLinear, as its
    Linear: every GEMM of both passes), None where they run in the compute dtype."""
    policy = ctx.precision
    if not policy.fp8_linear:
        return None
    compute = policy.autocast_dtype or policy.param_dtype
    if s.dtype != compute or s.hidden % FEATURE_MULTIPLE or s.ffn % FEATURE_MULTIPLE:
        return None
    return policy.linear_format


def cast_inputs(s: MoeShape, phase: str) -> int:
    """Elements the grouped GEMMs cast to the low-precision format, per pass:
    forward fc1's input (the routed tokens, S x H) and fc2's (S x F); backward
    the gradients fc2's and fc1's dgrad read (S x H, S x g F), which their
    wgrads read too (the cast writes both layouts)."""
    if phase == "forward":
        return s.routed * (s.hidden + s.ffn)
    return s.routed * (s.hidden + _inner(s))


def summed_gradient_bytes(s: MoeShape, ctx: CostContext) -> int:
    """Bytes per element of the gradient buffer each expert wgrad sums into
    (0: frozen experts, no wgrad).

    Megatron-Core's grouped experts (Transformer Engine's GroupedLinear with
    `gradient_accumulation_fusion`, on by default) run each wgrad as C += A B
    into the parameter's `main_grad` buffer, reading and writing it every
    micro-batch: 4 bytes each way where the gradients are fp32, 2 where they
    are bf16 (Megatron's default `grad_reduce_in_fp32=False`, the compute
    dtype a sharded plan is priced in). Few rows per expert (K = S / E) leave
    little math to hide that traffic behind: at 1,024 rows a wgrad does
    2 x 1024 = 2,048 FLOPs per output element for 8 bytes of an fp32 buffer,
    256 FLOPs/B, under a B200's ridge for fp8 (4.5 PFLOP/s over 8 TB/s, about
    560). PyTorch's autograd does the same sum in an add after the GEMM (a
    kernel more, not priced here)."""
    return ctx.precision.grad_bytes if s.weight_grads else 0


def expert_gemms(s: MoeShape, phase: str, ctx: CostContext) -> list[Gemm]:
    """The grouped GEMMs of the module docstring's table, per balanced split."""
    h, f, inner = s.hidden, s.ffn, _inner(s)
    fmt = expert_format(s, ctx)
    summed = summed_gradient_bytes(s, ctx)
    gemms = []
    for rows, experts in s.balanced_rows():
        if phase == "forward":
            shapes = [(rows, inner, h, "fc1 fprop"), (rows, h, f, "fc2 fprop")]
        else:
            shapes = [(rows, f, h, "fc2 dgrad"), (rows, h, inner, "fc1 dgrad")]
            if s.weight_grads:  # frozen experts (adapters trained beside them) have none
                shapes += [(h, f, rows, "fc2 wgrad"), (inner, h, rows, "fc1 wgrad")]
        for m, n, k, role in shapes:
            gemm = (Gemm(m, n, k, batch=experts, dtype=fmt.gemm_dtype, storage=fmt.gemm_dtype,
                         role=f"expert {role}")
                    if fmt else make_gemm(ctx, s.dtype, m, n, k, batch=experts,
                                          role=f"expert {role}"))  # fmt: skip
            if role.endswith("wgrad") and summed:
                gemm = replace(gemm, accumulate_bytes=summed)
            gemms.append(gemm)
    return gemms


def side_traffic(s: MoeShape, phase: str, weight_item: int) -> tuple[float, float, float]:
    """(bytes read, bytes written, FLOPs) of the memory-bound kernels around
    the GEMMs, S = T k rows of H (`weight_item`: bytes of a routing weight)."""
    item = s.dtype.itemsize
    rows, h, f, inner = s.routed, s.hidden, s.ffn, _inner(s)
    tokens = s.tokens * h * item  # T x H
    routed = rows * h * item  # S x H
    weights = rows * weight_item
    if phase == "forward":
        # permute: S rows gathered by expert id; activation; unpermute: each row
        # scaled by its routing weight and summed into its token's
        read = (routed + rows * ROUTING_INDEX_BYTES) + rows * inner * item + (routed + weights)
        written = routed + rows * f * item + tokens
        flops = rows * f * ACTIVATION_FLOPS[s.gated] + 2 * rows * h
        return read, written, flops
    # unpermute: the output gradient gathered per row and scaled (the row's
    # gradient), and the routing weight's gradient, a dot product with fc2's
    # saved output; the activation's gradient; the permute's scatter-add
    read = (routed + routed + weights) + rows * (inner + f) * item + routed
    written = (routed + weights) + rows * inner * item + tokens
    flops = rows * f * ACTIVATION_BACKWARD_FLOPS[s.gated] + 3 * rows * h + rows * h
    return read, written, flops


def expert_parallel_costed(e: OpEvent, ctx: CostContext, ep: int) -> Costed:
    """A traced layer call (`dlperf::moe` or its backward) as one GPU of an
    expert-parallel group of `ep` runs it, the router balanced: E / ep experts,
    each given ep times the rows (every rank's T k / E for it), so the same
    T k rows in all, over 1/ep of the expert weights."""
    s = moe_shape(e)
    local = replace(s, experts=s.experts // ep, expert_params=s.expert_params // ep)
    return _priced_shape(local, e.args[2].itemsize, ctx, _phase(e))


def _phase(e: OpEvent) -> str:
    return "forward" if e.op == MOE_OP else "backward"


def _priced(e: OpEvent, ctx: CostContext, phase: str) -> Costed:
    return _priced_shape(moe_shape(e), e.args[2].itemsize, ctx, phase)


def _priced_shape(s: MoeShape, weight_item: int, ctx: CostContext, phase: str) -> Costed:
    gemms = expert_gemms(s, phase, ctx)
    item = s.dtype.itemsize
    side_read, side_written, side_flops = side_traffic(s, phase, weight_item)
    side = FORWARD_SIDE_KERNELS if phase == "forward" else BACKWARD_SIDE_KERNELS
    fmt = expert_format(s, ctx)
    operand = fmt.bytes_per_element if fmt else item
    notes = []
    if fmt:  # the inputs' casts, side work streamed with the rest
        per_read, per_written, per_kernels = cast_bytes(fmt)
        cast = cast_inputs(s, phase)
        side_read, side_written = side_read + per_read * cast, side_written + per_written * cast
        side += 2 * per_kernels
        notes.append(f"{fmt.name} grouped GEMMs with their inputs' casts (the experts' "
                     "weights are cast once per step, not priced here)")  # fmt: skip
    # each GEMM reads its operands and writes its result once (the tile model
    # prices their real traffic); the side kernels' bytes are streamed after
    gemm_read = sum(g.batch * (g.m * g.k + g.k * g.n) for g in gemms) * operand
    gemm_written = sum(g.batch * g.m * g.n * (g.accumulate_bytes or item) for g in gemms)
    # a wgrad summed in place reads its fp32 buffer before writing it
    gemm_read += sum(g.batch * g.m * g.n * g.accumulate_bytes for g in gemms)
    cost = contraction(
        gemms,
        gemm_read + side_read,
        gemm_written + side_written,
        extra_flops=side_flops,
        kernels=len(gemms) + side,
        side_bytes=side_read + side_written,
    )
    per_expert = " or ".join(str(rows) for rows, _ in s.balanced_rows())
    return noted(
        cost,
        f"balanced router assumed: {s.tokens} tokens x top-{s.top_k} / {s.experts} experts "
        f"= {per_expert} rows per expert (real routers are uneven: the busiest expert "
        "sets the time)",
        "each projection is one grouped GEMM over the experts",
        *notes,
        *([f"the wgrads sum into their {summed_gradient_bytes(s, ctx)}-byte gradient "
           "buffers, read and written every micro-batch (Megatron-Core's "
           "gradient_accumulation_fusion)"] if summed_gradient_bytes(s, ctx) else []),
    )


@register(MOE_OP, **_MOE)
def moe_forward(e: OpEvent, ctx: CostContext) -> Costed:
    return _priced(e, ctx, "forward")


@register(MOE_BACKWARD_OP, **_MOE)
def moe_backward(e: OpEvent, ctx: CostContext) -> Costed:
    return _priced(e, ctx, "backward")
