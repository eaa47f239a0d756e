"""Activation checkpointing: the forward work backward runs again, and the
saved tensors the step keeps. One code path for time and memory: the regions
found here give both the recompute events (`with_recompute`, priced like any
other event) and the activations kept (`checkpoint_plan`).

Policies (`--checkpoint`):
- none: autograd keeps every saved tensor.
- full (alias `blocks`): every repeated block (transformer layer, ResNet
  bottleneck; `tracing.blocks`) is checkpointed, as `torch.utils.checkpoint`
  around each layer and Megatron-LM's full recompute do: forward keeps only
  the block's input, backward runs the block's forward again just before the
  block's own backward. Same as every:1.
- every:K: segments of K consecutive blocks, each keeping only its first
  input; `sqrt` is every:ceil(sqrt(blocks)) (Chen et al. 2016).
- selective-op: torchtitan's per-op policy (`torchtitan` activation
  checkpointing, mode "selective", option "op"): every block is checkpointed,
  but within it the outputs of every other linear GEMM (the 1st, 3rd, ... in
  forward order, as its mm counter keeps them) and of the fused attention
  kernel (output and log-sum-exp) are saved; the rest of the block runs again
  in backward. Linear GEMMs with a bias (addmm) count as torchtitan's bias-free
  mm.
- selective: only the attention core is recomputed (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", section
  4.2): Q K^T, the softmax, its dropout and the attention over V, whose saved
  tensors grow with the square of the sequence. Its inputs q, k, v stay saved.
- selective:A+B: Megatron-Core's selective recompute of named modules
  (`--recompute-modules`), each region's saved tensors dropped and run again
  in backward (`RECOMPUTE_MODULES`): core_attn (the attention core above),
  mla_up_proj (latent attention's up-projections through rotary to q, k and v,
  the attention's inputs, which the core keeps: its q_b_proj and kv_b_proj
  onward, the down-projections and their norms left saved), mlp (a dense MLP;
  a mixture of experts is not one) and layernorm (the blocks' input and
  post-attention norms). Module names are Hugging Face's: the Llama family's
  and GPT-2's (`ln_1`, `ln_2`); a named module the model lacks is refused.

The attention core, per forward event (`attention_cores`):
- a fused attention event (dlperf's own `dlperf.attention` op, or an aten
  `_scaled_dot_product_*` / `_flash_attention_forward` /
  `_efficient_attention_forward` op) is a core by itself: recomputing it
  drops the saved output and log-sum-exp; q, k, v stay;
- explicit (eager or math) attention: a batched matmul (bmm, baddbmm), a
  softmax run by the same module or one inside it, then the next batched
  matmul of that module; the core is every event between the two matmuls
  (both included) run by that module or a module inside it (scaling, mask,
  softmax, dropout, dtype casts). Those are the ops Korthikanti et al.
  recompute.

The recompute of a region is inserted just before the first backward event
attributed to it (for a core: to one of the modules its events ran in; for
a segment: to a module inside its blocks; backward events are attributed
through autograd nodes, `tracing.labels`), where backward really runs it.
Recomputed dropout draws its mask again: the same op, so the same cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from .errors import DlperfError
from .kinds import Phase, module_at_depth
from .ops.linear import activation_operand
from .tracing import OpEvent, Trace, within
from .tracing.moe import MOE_OP

CHECKPOINT_HELP = (
    "none, full, selective, selective-op, every:K (blocks = full, sqrt = every:sqrt(blocks)) or "
    "selective:MODULES (core_attn, mla_up_proj, mlp, layernorm joined by +)"
)
# Megatron-Core's --recompute-modules that dlperf prices (`recompute_regions`).
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "mlp", "layernorm")
ATTENTION_CORE = "core_attn"
# Latent attention's projections before its up-projections (kept saved), and those.
_LATENT_DOWN = ("q_a_proj", "kv_a_proj_with_mqa", "q_a_layernorm", "kv_a_layernorm")
_LATENT_UP = ("q_b_proj", "kv_b_proj")
_BLOCK_NORMS = ("input_layernorm", "post_attention_layernorm", "ln_1", "ln_2")

# Fused attention kernels, forward (their backward ops run in the backward phase).
FUSED_ATTENTION = (
    "dlperf.attention",
    "aten._scaled_dot_product_",
    "aten._flash_attention_forward",
    "aten._efficient_attention_forward",
)
BATCHED_MATMULS = frozenset({"aten.bmm", "aten.baddbmm"})
SOFTMAXES = frozenset({"aten._softmax", "aten._safe_softmax", "aten.softmax"})
_BACKWARD = Phase.BACKWARD.value
_FORWARD = Phase.FORWARD.value


@dataclass(frozen=True)
class CheckpointPlan:
    """Activation memory and recompute cost of one checkpointing policy."""

    policy: str
    activations_bytes: int
    recompute_s: float
    segments: int


@dataclass(frozen=True)
class Region:
    """Forward work backward runs again: the indices of its forward events in
    `trace.events`, and the index of the backward event it runs before (None
    when no backward reaches it: nothing is recomputed)."""

    forward: tuple[int, ...]
    before: int | None


def parse_checkpoint(text: str) -> tuple[str, int]:
    """The policy as (kind, K): 'every:4' -> ('every', 4), 'blocks' -> ('full', 1);
    none, full, selective and sqrt take no K (1)."""
    text = (text or "none").strip().lower()
    if text in ("none", "full", "selective", "selective-op", "sqrt"):
        return text, 1
    if text.startswith("selective:"):
        recompute_modules(text)  # refuses an unknown module
        return "selective", 1
    if text == "blocks":
        return "full", 1
    kind, _, k = text.partition(":")
    if kind == "every" and k.isdigit() and int(k) >= 1:
        return "every", int(k)
    raise DlperfError(f"unknown checkpoint policy {text!r}; use {CHECKPOINT_HELP}")


def recompute_modules(policy: str) -> tuple[str, ...]:
    """The modules a selective policy recomputes: the attention core for
    `selective`, the named ones for `selective:A+B`; none for the others."""
    text = (policy or "none").strip().lower()
    if text == "selective":
        return (ATTENTION_CORE,)
    if not text.startswith("selective:"):
        return ()
    names = tuple(dict.fromkeys(n for n in text.partition(":")[2].split("+") if n))
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown or not names:
        what = f"{', '.join(unknown)} is not a module dlperf recomputes" if unknown else "no module"
        raise DlperfError(
            f"--checkpoint {text}: {what}; name some of {', '.join(RECOMPUTE_MODULES)}, joined by +"
        )
    return names


def segments(trace: Trace, policy: str) -> list[list[str]]:
    """The checkpointed segments of repeated blocks (none for none or selective)."""
    kind, k = parse_checkpoint(policy)
    blocks = trace.blocks
    if kind in ("none", "selective") or not blocks:
        return []
    if kind == "sqrt":
        k = max(1, math.ceil(math.sqrt(len(blocks))))
    return [blocks[i : i + k] for i in range(0, len(blocks), k)]


def op_saved(trace: Trace) -> dict[str, list[int]]:
    """Per repeated block, the forward events whose outputs the per-op policy
    saves (selective-op, module docstring): every other linear GEMM, from the
    first, and the fused attention kernels. One pass over the trace."""
    owner = _segment_of([[b] for b in trace.blocks])
    saved: dict[str, list[int]] = {b: [] for b in trace.blocks}
    linears = dict.fromkeys(trace.blocks, 0)
    for i, e in enumerate(trace.events):
        n = owner(e.module) if e.phase == _FORWARD else None
        if n is None:
            continue
        block = trace.blocks[n]
        if _is_fused_attention(e):
            saved[block].append(i)
        elif activation_operand(e) is not None:
            linears[block] += 1
            if linears[block] % 2:
                saved[block].append(i)
    return saved


def op_saved_events(trace: Trace) -> set[int]:
    """Every event whose output the per-op policy saves, in any block."""
    return {i for block in op_saved(trace).values() for i in block}


def op_saved_bytes(trace: Trace) -> dict[str, int]:
    """Per repeated block, bytes of the outputs the per-op policy saves."""
    return {
        block: sum(t.nbytes for i in found for t in trace.events[i].outputs)
        for block, found in op_saved(trace).items()
    }


def _policy_name(trace: Trace, policy: str) -> str:
    kind, k = parse_checkpoint(policy)
    if kind == "selective":
        return "selective" if recompute_modules(policy) == (ATTENTION_CORE,) else policy.lower()
    if kind == "none":
        return kind
    if not trace.blocks:
        return f"{kind} (no repeated blocks)"
    return f"every:{k}" if kind == "every" else kind


def _is_fused_attention(e: OpEvent) -> bool:
    return e.op.startswith(FUSED_ATTENTION) and not e.op.endswith(("_backward", "backward.default"))


def attention_cores(trace: Trace) -> list[tuple[int, ...]]:
    """The forward events of each attention core, as indices (module docstring)."""
    cores: list[tuple[int, ...]] = []
    opened: dict[str, tuple[int, bool]] = {}  # module -> (its first matmul, softmax seen)
    events = trace.events
    for i, e in enumerate(events):
        if e.phase != _FORWARD:
            continue
        if _is_fused_attention(e):
            cores.append((i,))
        elif e.packet in SOFTMAXES:
            for module, (start, _) in opened.items():
                if within(e.module, module):
                    opened[module] = (start, True)
        elif e.packet in BATCHED_MATMULS:
            start, softmax_seen = opened.pop(e.module, (i, False))
            if not softmax_seen:
                opened[e.module] = (i, False)
                continue
            cores.append(
                tuple(
                    j
                    for j in range(start, i + 1)
                    if events[j].phase == _FORWARD and within(events[j].module, e.module)
                )
            )
    return cores


def _latent_up_regions(trace: Trace) -> list[tuple[int, ...]]:
    """Per latent attention module, its forward events from its first
    up-projection to its attention core, the down-projections and their norms
    left out (mla_up_proj, module docstring)."""
    cores = {i for core in attention_cores(trace) for i in core}
    opened: dict[str, list[int]] = {}
    closed: set[str] = set()
    for i, e in enumerate(trace.events):
        if e.phase != _FORWARD:
            continue
        parent, _, leaf = e.module.rpartition(".")
        owner = parent if leaf in _LATENT_UP + _LATENT_DOWN else e.module
        if owner in closed:
            continue
        if leaf in _LATENT_UP:
            opened.setdefault(owner, [])
        if owner not in opened or leaf in _LATENT_DOWN:
            continue
        if i in cores:  # the attention core reads q, k, v: the region ends before it
            closed.add(owner)
            continue
        opened[owner].append(i)
    return [tuple(found) for found in opened.values() if found]


def _module_regions(trace: Trace, name: str) -> list[tuple[int, ...]]:
    """The forward events of each instance of a named module (module docstring)."""
    if name == "mla_up_proj":
        return _latent_up_regions(trace)
    moe = {e.module for e in trace.events if e.op == MOE_OP}
    found: dict[str, list[int]] = {}
    for i, e in enumerate(trace.events):
        if e.phase != _FORWARD:
            continue
        parts = e.module.split(".")
        for depth in range(len(parts), 0, -1):
            path = ".".join(parts[:depth])
            leaf = parts[depth - 1]
            dense = name == "mlp" and leaf == "mlp" and not any(within(m, path) for m in moe)
            if dense or (name == "layernorm" and leaf in _BLOCK_NORMS):
                found.setdefault(path, []).append(i)
                break
    return [tuple(v) for v in found.values()]


def recompute_regions(trace: Trace, policy: str = "selective") -> list[tuple[int, ...]]:
    """The forward events of each region a selective policy recomputes, in trace order."""
    found: list[tuple[int, ...]] = []
    for name in recompute_modules(policy):
        if name == ATTENTION_CORE:
            found += attention_cores(trace)
            continue
        regions = _module_regions(trace, name)
        if not regions:
            raise DlperfError(
                f"--checkpoint {policy}: this model has no {name} dlperf can find (it matches "
                "Hugging Face's Llama-family and GPT-2 module names); drop it"
            )
        found += regions
    return sorted(found)


def recomputes_attention(policy: str) -> bool:
    """Whether backward runs the attention core again under `policy`: any
    checkpointing but a selective one that leaves the core out."""
    kind, _ = parse_checkpoint(policy)
    return kind != "none" and (kind != "selective" or ATTENTION_CORE in recompute_modules(policy))


def same_policy(a: str, b: str) -> bool:
    """Whether two policy strings recompute the same (aliases, module order)."""
    return parse_checkpoint(a) == parse_checkpoint(b) and set(recompute_modules(a)) == set(
        recompute_modules(b)
    )


def _first_backward(trace: Trace) -> dict[str, int]:
    """The index of each module's first backward event."""
    first: dict[str, int] = {}
    for i, e in enumerate(trace.events):
        if e.phase == _BACKWARD and e.module not in first:
            first[e.module] = i
    return first


def regions(trace: Trace, policy: str) -> list[Region]:
    """The regions `policy` recomputes, in the order of their forward events."""
    kind, _ = parse_checkpoint(policy)
    if not trace.training or kind == "none":
        return []
    first = _first_backward(trace)
    if kind == "selective":
        found = []
        for core in recompute_regions(trace, policy):
            modules = {trace.events[i].module for i in core}
            starts = [first[m] for m in modules if m in first]
            found.append(Region(core, min(starts) if starts else None))
        return found
    found = segments(trace, policy)
    owner = _segment_of(found)
    kept = op_saved_events(trace) if kind == "selective-op" else set()
    forward: list[list[int]] = [[] for _ in found]
    for i, e in enumerate(trace.events):
        n = owner(e.module) if e.phase == _FORWARD and i not in kept else None
        if n is not None:
            forward[n].append(i)
    starts: list[int | None] = [None] * len(found)
    for module, i in first.items():
        n = owner(module)
        if n is not None and (starts[n] is None or i < starts[n]):
            starts[n] = i
    return [Region(tuple(f), start) for f, start in zip(forward, starts, strict=True)]


def _segment_of(found: list[list[str]]) -> Callable[[str], int | None]:
    """The number of the segment a module path lies in (None: outside them all)."""
    number = {block: n for n, segment in enumerate(found) for block in segment}
    memo: dict[str, int | None] = {}

    def owner(path: str) -> int | None:
        if path not in memo:
            memo[path] = next((n for b, n in number.items() if within(path, b)), None)
        return memo[path]

    return owner


def _recomputed(trace: Trace, region: Region) -> list[OpEvent]:
    return [
        dataclasses.replace(trace.events[i], phase=Phase.RECOMPUTE.value) for i in region.forward
    ]


def recompute_events(trace: Trace, policy: str) -> list[OpEvent]:
    """Copies of the forward events `policy` runs again in backward (phase
    "recompute"), in the order backward runs them."""
    return [e for _, e in _placed(trace, policy)]


def _placed(trace: Trace, policy: str) -> list[tuple[int, OpEvent]]:
    """Each recompute event with the index of the event it runs before."""
    placed = []
    for region in regions(trace, policy):
        if region.before is not None:
            placed += [(region.before, e) for e in _recomputed(trace, region)]
    placed.sort(key=lambda pair: pair[0])  # stable: a region's events keep their order
    return placed


def with_recompute(trace: Trace, policy: str) -> list[OpEvent]:
    """The trace's events with each recomputed region's forward events (copies,
    phase "recompute") inserted just before the first backward event of that
    region: the step's timeline under `policy`."""
    placed = _placed(trace, policy)
    if not placed:
        return list(trace.events)
    out: list[OpEvent] = []
    at = 0
    for i, e in enumerate(trace.events):
        while at < len(placed) and placed[at][0] == i:
            out.append(placed[at][1])
            at += 1
        out.append(e)
    return out


# -- memory --------------------------------------------------------------------


def _activations_per_block(trace: Trace) -> tuple[dict[str, int], int]:
    """Saved activations of each repeated block, and of everything outside them."""
    per_block = {b: 0 for b in trace.blocks}
    outside = 0
    for t in trace.saved:
        if t.kind != "activation":
            continue
        owner = next((b for b in trace.blocks if within(t.module, b)), None)
        if owner is None:
            outside += t.nbytes
        else:
            per_block[owner] += t.nbytes
    return per_block, outside


def _created_by(trace: Trace) -> dict[int, int]:
    """The index of the event that first wrote each storage (its creator)."""
    creator: dict[int, int] = {}
    for i, e in enumerate(trace.events):
        for storage in e.writes:
            creator.setdefault(storage, i)
    return creator


def core_saved_bytes(trace: Trace, policy: str = "selective") -> list[int]:
    """Per region a selective policy recomputes (`recompute_regions`; the
    attention cores by default), the saved activations it creates, which
    recomputing it drops: the storages first written by its events (a core's
    softmax output, dropout mask and output; a fused kernel's output and
    log-sum-exp). Its inputs are created before it and stay saved.

    The trace keeps one saver per storage: a tensor of the core that a later op
    also saved for itself would stay, and the trace cannot tell. The ops after
    attention copy its output when they merge the heads, so none is seen.
    """
    return region_saved_bytes(trace, recompute_regions(trace, policy))


def region_saved_bytes(trace: Trace, found: list[tuple[int, ...]]) -> list[int]:
    """Per region (forward event indices), the saved activations its events create."""
    creator = _created_by(trace)
    activations = [t for t in trace.saved if t.kind == "activation"]
    out = []
    for region in found:
        inside = set(region)
        out.append(sum(t.nbytes for t in activations if creator.get(t.storage, -1) in inside))
    return out


def _selective_bytes(trace: Trace, policy: str) -> int:
    """Activations when each region is recomputed: all, less what the regions
    create, plus one region's worth (backward brings one back at a time)."""
    dropped = core_saved_bytes(trace, policy)
    return trace.activation_bytes - sum(dropped) + max(dropped, default=0)


def checkpoint_plan(
    trace: Trace, policy: str, price: Callable[[list[OpEvent]], float] | None = None
) -> CheckpointPlan:
    """Activations kept and recompute time under `policy`.

    A checkpointed segment keeps only its input; its own activations come back,
    one segment at a time, when backward recomputes its forward. The recompute
    time is `price` of the events `with_recompute` inserts (the caller prices
    them as the analysis does; None: not priced, 0).
    """
    kind, _ = parse_checkpoint(policy)
    name = _policy_name(trace, policy)
    recompute = recompute_events(trace, policy)
    recompute_s = price(recompute) if price and recompute else 0.0
    if kind == "selective":
        return CheckpointPlan(name, int(_selective_bytes(trace, policy)), recompute_s, 0)
    found = segments(trace, policy) if trace.training else []  # inference saves nothing
    if not found:
        return CheckpointPlan(name, trace.activation_bytes, 0.0, 0)
    _, outside = _activations_per_block(trace)
    kept, largest = _segment_terms(trace, found, kind)
    return CheckpointPlan(name, int(outside + sum(kept) + largest), recompute_s, len(found))


def _segment_terms(trace: Trace, found: list[list[str]], kind: str) -> tuple[list[int], int]:
    """(per segment what forward keeps: its input, and under selective-op the
    outputs the policy saves; the largest segment's recomputed activations,
    which backward brings back one segment at a time)."""
    per_block, _ = _activations_per_block(trace)
    saved = op_saved_bytes(trace) if kind == "selective-op" else dict.fromkeys(trace.blocks, 0)
    kept, largest = [], 0
    for seg in found:
        by_op = sum(saved[b] for b in seg)
        kept.append(trace.module_inputs.get(seg[0], 0) + by_op)
        largest = max(largest, sum(per_block[b] for b in seg) - by_op)
    return kept, largest


RECOMPUTED = "(one segment, recomputed in backward)"


def kept_by_module(trace: Trace, policy: str, depth: int = 2) -> dict[str, int]:
    """The activations `checkpoint_plan` keeps under `policy`, per module path
    cut at `depth` levels, largest first; they add up to its activations. A
    checkpointed segment keeps its input (under the segment's first block) and
    the largest segment's activations come back in backward (RECOMPUTED)."""
    kind, _ = parse_checkpoint(policy)
    saved = [(t.module, t.nbytes, t.storage) for t in trace.saved if t.kind == "activation"]
    found = segments(trace, policy) if trace.training and kind != "selective" else []
    if kind == "selective":
        creator, cores = _created_by(trace), recompute_regions(trace, policy)
        dropped = region_saved_bytes(trace, cores)
        if cores:
            kept_core = dropped.index(max(dropped))  # backward brings one back at a time
            gone = {i for j, core in enumerate(cores) if j != kept_core for i in core}
            saved = [s for s in saved if creator.get(s[2], -1) not in gone]
    elif found:
        kept, largest = _segment_terms(trace, found, kind)
        saved = [s for s in saved if not any(within(s[0], b) for b in trace.blocks)]
        saved += [(seg[0], n, -1) for seg, n in zip(found, kept, strict=True)]
        saved.append((RECOMPUTED, largest, -1))
    out: dict[str, int] = {}
    for module, nbytes, _ in saved:
        key = module if module == RECOMPUTED else module_at_depth(module, depth)
        out[key] = out.get(key, 0) + nbytes
    return dict(sorted(out.items(), key=lambda kv: kv[1], reverse=True))
