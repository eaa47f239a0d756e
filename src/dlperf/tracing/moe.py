"""Mixture-of-experts layers traced as a grouped-GEMM MoE runs them.

Which tokens an expert receives depends on the router's values, which fake
tensors do not have: the experts' own code fails on them (a `nonzero` per
expert) or hides each expert's share (one grouped GEMM split by token
counts read at run time). While tracing, each
sparse MoE layer's experts therefore run as one custom op, `dlperf::moe`
(its backward `dlperf::moe_backward`): one event per layer call and phase,
whose arguments carry the layer's configuration (`MoeShape`) and which
`ops/moe.py` prices at the token counts a balanced router gives.

Which modules (`routed_experts` finds them; the rest of the model is traced
as it is):
1. transformers' experts modules (version 5 on, `use_experts_implementation`:
   Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, OLMoE, GPT-OSS, Jamba, ...): a module
   held as `experts` by a block that also holds a router (`gate` or `router`)
   whose weight is (experts, hidden); its own parameters include 3-D
   (experts, ., .) tensors, and it is called as
   experts(hidden (T, H), top_k_index (T, k), top_k_weights (T, k)). Only
   that call becomes the op: the router, shared experts and the rest of the
   block run, and are recorded, as the model's code runs them.
2. a block holding `experts` as an `nn.ModuleList` of expert MLPs and a
   router Linear (`gate` or `router`) to as many outputs as experts, with its
   top-k in `top_k` or `num_experts_per_tok` (Mixtral-style code of
   transformers 4, user models): the whole block runs as the router Linear,
   a softmax, the top-k (renormalised unless `norm_topk_prob` is false), the
   op, plus `shared_expert(s)` when the block has them (scaled by the
   sigmoid of `shared_expert_gate` when it has one); it returns the hidden
   states only.
3. a block whose `experts` hold 3-D (E, ., .) weights but take the routed
   tokens alone, with a router Linear and a top-k (Llama-4's: transformers
   runs every expert on every token, scaled by its router score, which no
   engine does): the whole block runs as in rule 2, the top-k logits through
   a sigmoid as Llama-4 routes, and returns (hidden states, router logits)
   as Llama-4's block does.

Gated experts (SwiGLU: gate, up and down matrices) are told by the module's
`has_gate` (transformers) or by their number of matrices; the expert's FFN
size F follows from its parameters: gated H x F x 3 elements, plain x 2.

What the op keeps for backward is what Megatron-Core's grouped-GEMM MoE
(`TEGroupedMLP`) keeps: the dispatcher sends each routed token's routing
weight with it and the experts apply it inside the activation (the fused
weighted SwiGLU, `weighted_bias_swiglu_impl`, which saves only its input
and the weights); the combine's unpermute then sums the rows unweighted and
keeps only its index map. So per routed token: the permuted input (H, fc1's
saved input), the first GEMM's output (2F gated, F plain: the activation's
input) and the activation that feeds the second GEMM (F, fc2's saved
input); plus the top-k indices and weights. The second GEMM's output (H)
is written and combined but not kept: the routing weights' gradient is
the activation's, from its input. Under fp8 the GEMMs keep their inputs
quantized (`training_memory.fused`, `--kernels te`). The recorder's
saved-tensor hooks see them like any other.

Under autocast the experts run in the autocast dtype, as a linear layer
would (weights cast like autocast casts a linear layer's); their output is
cast back to the input's dtype, as transformers does.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..errors import DlperfError
from .events import OpEvent, TensorMeta

MOE_OP = "dlperf.moe.default"
MOE_BACKWARD_OP = "dlperf.moe_backward.default"
ROUTER_NAMES = ("gate", "router")
TOP_K_NAMES = ("top_k", "num_experts_per_tok", "topk")


@torch.library.custom_op("dlperf::moe", mutates_args=())
def moe(
    hidden: Tensor,
    top_k_index: Tensor,
    top_k_weights: Tensor,
    weights: list[Tensor],
    experts: int,
    ffn: int,
    gated: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(output (T, H), permuted input (T k, H), first GEMM's output (T k, 2F
    or F), activation (T k, F), second GEMM's output (T k, H)); traced only."""
    raise NotImplementedError("dlperf::moe is traced on fake tensors only")


@moe.register_fake
def _(hidden, top_k_index, top_k_weights, weights, experts, ffn, gated):
    routed, size = top_k_index.numel(), hidden.shape[-1]
    return (
        torch.empty_like(hidden),
        hidden.new_empty((routed, size)),
        hidden.new_empty((routed, ffn * (2 if gated else 1))),
        hidden.new_empty((routed, ffn)),
        hidden.new_empty((routed, size)),
    )


@torch.library.custom_op("dlperf::moe_backward", mutates_args=())
def moe_backward(
    grad_out: Tensor,
    top_k_index: Tensor,
    top_k_weights: Tensor,
    weights: list[Tensor],
    routed: Tensor,
    first: Tensor,
    activation: Tensor,
    experts: int,
    ffn: int,
    gated: bool,
    weight_grads: bool,
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """(d hidden, d top_k_weights, d weights: none unless `weight_grads`,
    frozen experts have no weight gradients); traced only."""
    raise NotImplementedError("dlperf::moe_backward is traced on fake tensors only")


@moe_backward.register_fake
def _(grad_out, top_k_index, top_k_weights, weights, routed, first, activation, experts, ffn,
      gated, weight_grads):  # fmt: skip
    grads = [torch.empty_like(w) for w in weights] if weight_grads else []
    return torch.empty_like(grad_out), torch.empty_like(top_k_weights), grads


def _setup_context(ctx, inputs, output) -> None:
    _, top_k_index, top_k_weights, weights, experts, ffn, gated = inputs
    _, routed, first, activation, second = output
    # the second GEMM's output is not kept (module docstring)
    ctx.save_for_backward(top_k_index, top_k_weights, routed, first, activation, *weights)
    ctx.mark_non_differentiable(routed, first, activation, second)
    ctx.set_materialize_grads(False)
    ctx.config = (experts, ffn, gated, any(w.requires_grad for w in weights))


def _backward(ctx, grad_out, *unused):
    index, top_weights, routed, first, activation, *weights = ctx.saved_tensors
    saved = (routed, first, activation)
    grad_hidden, grad_top, grads = moe_backward(
        grad_out, index, top_weights, weights, *saved, *ctx.config
    )
    weight_grads = list(grads) or [None] * len(weights)  # autograd wants one per weight
    return grad_hidden, None, grad_top, weight_grads, None, None, None


moe.register_autograd(_backward, setup_context=_setup_context)


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer call, as its `dlperf::moe` event records it."""

    tokens: int  # T: tokens routed by the layer
    hidden: int  # H
    ffn: int  # F: each expert's inner size
    experts: int  # E
    top_k: int  # k: experts per token
    gated: bool  # three matrices (SwiGLU) or two
    dtype: torch.dtype  # of the tokens the experts compute on
    expert_params: int  # elements of the expert weights (every expert's)
    weight_grads: bool = True  # backward computes the weights' gradients (not frozen)

    @property
    def routed(self) -> int:
        """Token-expert pairs: T x k rows through the experts."""
        return self.tokens * self.top_k

    def balanced_rows(self) -> list[tuple[int, int]]:
        """(rows, experts given that many) under a balanced router: T k / E
        each, the remainder one more row to as many experts."""
        base, extra = divmod(self.routed, self.experts)
        split = [(base + 1, extra), (base, self.experts - extra)]
        return [(rows, count) for rows, count in split if count and rows]


def moe_shape(event: OpEvent) -> MoeShape:
    """The layer call behind a `dlperf::moe` or `dlperf::moe_backward` event."""
    args = event.args
    weights = [w for w in args[3] if isinstance(w, TensorMeta)]
    backward = event.op == MOE_BACKWARD_OP
    experts, ffn, gated = args[7:10] if backward else args[4:7]
    tokens, top_k = args[1].shape  # the (T, k) top-k index
    hidden = args[0]  # the input forward, its gradient backward: same shape
    return MoeShape(
        tokens=tokens,
        hidden=hidden.shape[-1],
        ffn=int(ffn),
        experts=int(experts),
        top_k=top_k,
        gated=bool(gated),
        dtype=hidden.dtype,
        expert_params=sum(w.numel for w in weights),
        weight_grads=bool(args[10]) if backward else True,
    )


def _router_of(block: nn.Module) -> nn.Module | None:
    return next((getattr(block, n) for n in ROUTER_NAMES if hasattr(block, n)), None)


def _router_experts(block: nn.Module) -> int | None:
    """The experts the block's router scores: rows of its (E, H) weight."""
    router = _router_of(block)
    weight = getattr(router, "weight", None) if isinstance(router, nn.Module) else None
    return weight.shape[0] if isinstance(weight, Tensor) and weight.dim() == 2 else None


def _routing_arguments(experts: nn.Module) -> tuple[inspect.Signature, list[str]] | None:
    """The experts' forward signature and the names of its first three
    positional parameters (hidden states, top-k index, top-k weights)."""
    try:
        signature = inspect.signature(experts.forward)
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in signature.parameters.values() if p.kind in positional][:3]
    return (signature, names) if len(names) == 3 else None


def _stacked_weights(experts: nn.Module, count: int) -> bool:
    """Its own weights are 3-D, (E, ., .), one slice per expert."""
    stacked = [p for p in experts.parameters(recurse=False) if p.dim() == 3]
    return bool(stacked) and all(p.shape[0] == count for p in stacked)


def _stacked_experts(experts: nn.Module, count: int) -> bool:
    """transformers' experts module: 3-D (E, ., .) weights, called with the routing."""
    return _stacked_weights(experts, count) and _routing_arguments(experts) is not None


def _is_gated(experts: nn.Module) -> bool:
    if isinstance(experts, nn.ModuleList):
        return sum(p.dim() == 2 for p in experts[0].parameters()) >= 3
    has_gate = getattr(experts, "has_gate", None)
    if has_gate is not None:
        return bool(has_gate)
    return any("gate" in name for name, p in experts.named_parameters() if p.dim() == 3)


def _ffn_size(weights: list[Tensor], experts: int, hidden: int, gated: bool, where: str) -> int:
    """F from the expert matrices (the weights of most dimensions: biases have
    one fewer): each expert holds H x F x (3 gated, 2 plain) elements."""
    rank = max((w.dim() for w in weights), default=0)
    elements = sum(w.numel() for w in weights if w.dim() == rank >= 2)
    per_unit = experts * hidden * (3 if gated else 2)
    if not elements or elements % per_unit:
        raise DlperfError(
            f"{where}: cannot size its experts ({elements} weight elements are not "
            f"{experts} experts x hidden {hidden} x {'3' if gated else '2'} matrices); "
            "dlperf traces experts of gate/up/down or up/down matrices"
        )
    return elements // per_unit


def run_experts(
    hidden: Tensor, index: Tensor, top_weights: Tensor, weights: list[Tensor], experts: int,
    gated: bool, where: str,
) -> Tensor:  # fmt: skip
    """The routed experts as one `dlperf::moe` call, in the dtype autocast would run."""
    shape, dtype = hidden.shape, hidden.dtype
    flat = hidden.reshape(-1, shape[-1])
    ffn = _ffn_size(weights, experts, shape[-1], gated, where)
    if torch.is_autocast_enabled("cpu") and flat.is_floating_point():
        run = torch.get_autocast_dtype("cpu")
        flat = flat.to(run)
        weights = [w.to(run) if w.is_floating_point() else w for w in weights]
    out = moe(flat, index.reshape(flat.shape[0], -1), top_weights.reshape(flat.shape[0], -1),
              weights, experts, ffn, gated)[0]  # fmt: skip
    return out.to(dtype).reshape(shape)


def _experts_forward(module: nn.Module, experts: int, where: str):
    """Replaces a transformers experts module's forward (rule 1)."""
    signature, names = _routing_arguments(module)

    def forward(*args, **kwargs):
        given = signature.bind(*args, **kwargs).arguments
        routing = [given.get(name) for name in names]
        if len(given) > 3 or not all(isinstance(t, Tensor) for t in routing):
            raise DlperfError(
                f"{where}: its experts take other arguments than (hidden states, top-k "
                "index, top-k weights); dlperf cannot trace this MoE layer"
            )
        weights = list(module.parameters())
        return run_experts(*routing, weights, experts, _is_gated(module), where)

    return forward


def _block_forward(block: nn.Module, top_k: int, where: str, count: int, stacked: bool = False):
    """Replaces a block with a ModuleList of experts (rule 2), or with stacked
    experts that take the routed tokens alone (rule 3: Llama-4's, whose
    router keeps the top-k logits through a sigmoid, unnormalised, and whose
    block returns the router's logits beside its output)."""

    def forward(hidden_states, *rest, **options):
        flat = hidden_states.reshape(-1, hidden_states.shape[-1])
        logits = _router_of(block)(flat)
        if stacked:
            # Llama-4's router returns (sigmoid of its kept top-k logits, the logits)
            scores = logits[0] if isinstance(logits, tuple) else torch.sigmoid(logits.float())
            logits = logits[-1] if isinstance(logits, tuple) else logits
            top_weights, index = torch.topk(scores, top_k, dim=-1)
        else:
            probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
            top_weights, index = torch.topk(probs, top_k, dim=-1)
            if getattr(block, "norm_topk_prob", True):
                top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
        experts = block.experts
        out = run_experts(flat, index, top_weights.to(flat.dtype), list(experts.parameters()),
                          count, _is_gated(experts), where)  # fmt: skip
        shared = next(
            (getattr(block, n) for n in ("shared_experts", "shared_expert") if hasattr(block, n)),
            None,
        )
        if isinstance(shared, nn.Module):
            extra = shared(flat)
            gate = getattr(block, "shared_expert_gate", None)
            out = out + (torch.sigmoid(gate(flat)) * extra if gate is not None else extra)
        out = out.reshape(hidden_states.shape)
        return (out, logits) if stacked else out

    return forward


def _top_k(block: nn.Module) -> int | None:
    holders = (block, _router_of(block), getattr(block, "config", None))
    for holder in holders:
        for name in TOP_K_NAMES:
            value = getattr(holder, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def moe_replacements(model: nn.Module) -> dict[nn.Module, object]:
    """Each MoE module of `model` and the forward it runs while traced (see
    the module docstring for the rule)."""
    found = {}
    for path, block in model.named_modules():
        experts = getattr(block, "experts", None)
        count = _router_experts(block)
        if not isinstance(experts, nn.Module) or count is None:
            continue
        top_k, linear_router = _top_k(block), isinstance(_router_of(block), nn.Linear)
        if isinstance(experts, nn.ModuleList):
            if len(experts) == count and top_k and linear_router:
                found[block] = _block_forward(block, top_k, path, count)
        elif _stacked_experts(experts, count):
            found[experts] = _experts_forward(experts, count, f"{path}.experts")
        elif _stacked_weights(experts, count) and top_k and linear_router:
            found[block] = _block_forward(block, top_k, path, count, stacked=True)
    return found


@contextlib.contextmanager
def routed_experts(model: nn.Module):
    """While the block runs, each MoE module of `model` runs as `dlperf::moe`
    (an instance attribute shadows its class's forward; removed after, so the
    model is left as it was)."""
    replaced = moe_replacements(model)
    had_own = {m: "forward" in m.__dict__ for m in replaced}
    saved = {m: m.__dict__["forward"] for m, own in had_own.items() if own}
    try:
        for module, forward in replaced.items():
            module.forward = forward
        yield
    finally:
        for module in replaced:
            if module in saved:
                module.forward = saved[module]
            else:
                module.__dict__.pop("forward", None)
