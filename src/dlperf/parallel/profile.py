"""The model as the planner sees it: one traced step at the micro-batch,
summarised per repeated block and for what runs before the blocks (the
embeddings: the first pipeline stage) and after them (the head and the
loss: the last stage).

Every figure is per micro-batch on one GPU, as traced, before any
parallelism: bytes of saved activations (and the parts tensor parallelism
splits, `tensor_parallel.py`, and selective recompute drops, the attention
cores of `checkpointing`), the block's input (what a
checkpointed segment keeps), the largest backward working set, the
predicted seconds of each phase under the run's checkpointing policy
(recompute counted in backward, where it runs), and the contraction FLOPs
(MFU). Mixture-of-experts facts come from `parallel.moe.moe_facts` where the
model has routed experts: MoE layers, experts, top-k, expert parameters,
tokens per layer call and the hidden size; `experts == 0` is a dense model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..checkpointing import op_saved, op_saved_events
from ..dtypes import bytes_per_element
from ..kinds import Category
from ..models.inputs import resize_inputs
from ..ops.linear import activation_operand
from ..precision import Precision
from ..precision import precision as resolve_precision
from ..run import first_tensor
from ..tracing import Trace, within
from ..tracing.moe import MOE_BACKWARD_OP, MOE_OP
from ..training_memory import (
    attention_cores,
    checkpoint_plan,
    parse_checkpoint,
    recompute_modules,
    recompute_regions,
    region_saved_bytes,
    step_peaks,
    transient_bytes,
)
from ..training_memory.report import saved_as_run
from .moe import expert_parallel_scales, moe_facts
from .tensor_parallel import has_linear_layers, roofline_weight, split_share, split_storages

_ATTENTION_FAMILIES = frozenset({"attention", "softmax"})
_BATCHED_MATMULS = ("aten.bmm", "aten.baddbmm")


@dataclass
class ModelProfile:
    """What the planner needs from one traced step at `micro_batch` (module doc)."""

    name: str
    params: int
    block_params: int
    blocks: int
    micro_batch: int
    tokens_per_sample: int
    precision: Precision  # a policy name is resolved to its Precision
    optimizer: str
    checkpoint: str = "none"  # the policy the times below were priced under
    # saved activations per micro-batch, bytes
    block_activations_bytes: float = 0.0  # per block, everything autograd saves
    block_split_bytes: float = 0.0  # of which in regions tensor parallelism splits
    block_core_bytes: float = 0.0  # of which the attention core (selective recompute drops)
    block_input_bytes: float = 0.0  # one block's input (a checkpointed segment keeps it)
    # what selective-op saves in a block (`checkpointing.op_saved`): split by tp, and whole
    block_op_split_bytes: float = 0.0
    block_op_replicated_bytes: float = 0.0
    # tp all-reduces a checkpointed block's recompute repeats: its row-parallel
    # linear GEMMs that run again (all of them, or selective-op's unsaved ones)
    block_recomputed_reduces: float = 2.0
    pre_activations_bytes: float = 0.0  # before the blocks (embeddings)
    post_activations_bytes: float = 0.0  # after the blocks (final norm, head, loss)
    post_split_bytes: float = 0.0  # of which split (vocabulary-parallel logits and loss)
    block_transient_bytes: float = 0.0  # largest backward working set of one op, in a block
    post_transient_bytes: float = 0.0  # the same after the blocks (the loss's gradient)
    pre_transient_bytes: float = 0.0  # the same before them (the embeddings' gradients)
    # the activation between blocks: elements, and bytes per element in the math dtype
    boundary_elements: float = 0.0
    activation_itemsize: int = 2
    kv_elements: float = 0.0  # per block: the keys and values attention reads
    # the caching allocator's reserve beyond the live tensors, as a share of the
    # activations and backward transient (`training_memory.step_peaks`)
    allocator_share: float = 0.0
    # blocks whose saved activations are offloaded to host memory, and the link's bytes/s
    offload_layers: int = 0
    host_bytes_per_s: float = 0.0
    ep_comm_overlap: bool = False  # all-to-alls behind another micro-batch's compute
    ep_once_per_node: bool = False  # the flex dispatcher: a token crosses to a node once
    # host seconds per expert GEMM where the host issues the experts one by one
    # (Transformer Engine's GroupedLinear outside CUDA graphs); 0: not issued so
    expert_gemm_host_s: float = 0.0
    # bytes per element of the gradients sharded data parallelism reduce-scatters
    # (`Run.reduce_dtype`: fp32 by default, as FSDP2 and torchtitan)
    reduce_bytes: int = 4
    heads: int = 0  # attention heads (0: not known; tp must divide them)
    kv_heads: int = 0  # key/value heads (grouped-query attention)
    # predicted seconds per micro-batch (backward includes its recompute)
    block_forward_s: float = 0.0
    block_backward_s: float = 0.0
    block_recompute_s: float = 0.0  # of block_backward_s, the recomputed forward
    block_split_share: float = 0.0  # share of the block's time in ops tp splits
    block_attention_s: float = 0.0  # the attention core, forward and backward
    pre_forward_s: float = 0.0
    pre_backward_s: float = 0.0
    post_forward_s: float = 0.0
    post_backward_s: float = 0.0
    post_split_share: float = 0.0
    optimizer_s: float = 0.0
    model_flops: float = 0.0  # contraction FLOPs of forward and backward, no recompute
    peak_flops_per_s: float = 0.0  # the GPU's peak in the contraction dtype
    pre_params: int = 0  # parameters before the blocks (the first stage holds them)
    post_params: int = 0  # after the blocks (the last stage; a tied embedding's copy)
    tensor_parallel: bool = True  # the blocks have linear layers to split
    # mixture of experts (0: a dense model)
    moe_layers: int = 0
    experts: int = 0
    top_k: int = 0
    expert_params: int = 0
    moe_tokens: int = 0  # tokens into one MoE layer per micro-batch
    moe_hidden: int = 0
    # of the block's seconds, its MoE layer calls (the grouped GEMMs and the kernels
    # around them) forward, backward and recomputed, all experts on one GPU as traced
    block_moe_forward_s: float = 0.0
    block_moe_backward_s: float = 0.0
    block_moe_recompute_s: float = 0.0
    # per ep, those calls' (forward, backward) time on one GPU of the expert-parallel
    # group over their time as traced (`parallel.moe.expert_parallel_scales`)
    moe_ep_scales: dict = field(default_factory=dict, repr=False)
    # the trainable parameters' shapes (a factored optimizer's states follow them)
    param_shapes: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.precision = resolve_precision(self.precision)

    @property
    def block_replicated_bytes(self) -> float:
        return self.block_activations_bytes - self.block_split_bytes

    @property
    def params_per_block(self) -> float:
        return self.block_params / max(self.blocks, 1)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def block_seconds(self, ep: int) -> tuple[float, float]:
        """(forward, backward with its recompute) of one block on one GPU, its
        MoE layer calls as one GPU of an expert-parallel group of `ep` runs them."""
        forward, backward = self.moe_ep_scales.get(ep, (1.0, 1.0))
        return (
            self.block_forward_s + self.block_moe_forward_s * (forward - 1),
            self.block_backward_s
            + self.block_moe_backward_s * (backward - 1)
            + self.block_moe_recompute_s * (forward - 1),
        )

    def segment_blocks(self, blocks_on_stage: int) -> int:
        """Blocks per checkpointed segment (0: no block is checkpointed)."""
        kind, k = parse_checkpoint(self.checkpoint)
        if kind in ("none", "selective") or not self.blocks:
            return 0
        if kind == "sqrt":
            return max(1, math.ceil(math.sqrt(max(blocks_on_stage, 1))))
        return k


class _Regions:
    """Where each module path lies: in a block, before the blocks or after them."""

    def __init__(self, trace: Trace):
        self.blocks = trace.blocks
        first_seen: dict[str, int] = {}
        start = None
        for i, e in enumerate(trace.events):
            if e.phase != "forward":
                continue
            first_seen.setdefault(e.module, i)
            if start is None and self.block_of(e.module) is not None:
                start = i
        self._first = first_seen
        self._start = start if start is not None else len(trace.events)
        self._memo: dict[str, str] = {}

    def block_of(self, path: str) -> str | None:
        return next((b for b in self.blocks if within(path, b)), None)

    def __call__(self, path: str) -> str:
        if path not in self._memo:
            if self.block_of(path) is not None:
                found = "block"
            else:
                probe = path
                while probe not in self._first and "." in probe:
                    probe = probe.rpartition(".")[0]
                seen = self._first.get(probe)
                found = "pre" if seen is not None and seen < self._start else "post"
            self._memo[path] = found
        return self._memo[path]


def _saved(trace: Trace, region, split: frozenset[int]) -> dict[str, float]:
    out = {"block": 0.0, "block_split": 0.0, "pre": 0.0, "post": 0.0, "post_split": 0.0}
    for t in trace.saved:
        if t.kind != "activation":
            continue
        where = region(t.module)
        out[where] += t.nbytes
        if where != "pre" and t.storage in split:
            out[where + "_split"] += t.nbytes
    return out


def _transients(trace: Trace, region) -> dict[str, float]:
    """The largest backward working set per region: an op's outputs and its
    incoming gradient (its first input, unless that is a saved activation,
    which the activations count already), each storage once (an in-place op
    writes where it reads)."""
    out = {"block": 0.0, "pre": 0.0, "post": 0.0}
    saved = trace.saved_ids
    for e in trace.events:
        if e.phase != "backward":
            continue
        inputs = e.tensors()
        held: dict[int, int] = {}
        if inputs and e.reads and e.reads[0] not in saved:
            held[e.reads[0]] = inputs[0].nbytes
        for i, o in enumerate(e.outputs):
            storage = e.writes[i] if i < len(e.writes) else -1 - i
            held[storage] = max(held.get(storage, 0), o.nbytes)
        size = sum(held.values())
        where = region(e.module)
        out[where] = max(out[where], size)
    return out


def _cores(trace: Trace, region, policy: str) -> tuple[float, float, tuple[int, int]]:
    """Saved bytes in blocks of the regions a selective `policy` recomputes
    (the attention cores unless it names modules), the K and V elements the
    attention cores read, and (query heads, key/value heads) where a fused
    kernel says (0: unknown)."""
    events = trace.events
    found = recompute_regions(trace, policy if recompute_modules(policy) else "selective")
    dropped = sum(s for r, s in zip(found, region_saved_bytes(trace, found), strict=True)
                  if region(events[r[0]].module) == "block")  # fmt: skip
    kv = 0.0
    heads = (0, 0)
    for core in attention_cores(trace):
        first, last = events[core[0]], events[core[-1]]
        if region(first.module) != "block":
            continue
        if len(core) == 1:  # a fused kernel reads q, k, v as (batch, heads, length, size)
            q, *operands = first.tensors()[:3]
            if len(q.shape) == 4:
                heads = (q.shape[1], operands[0].shape[1])
        else:  # scores = q k^T, then probabilities x v
            operands = [first.tensors()[-1], last.tensors()[-1]]
        kv += sum(t.numel for t in operands)
    return dropped, kv, heads


def _op_saved(trace: Trace, split: frozenset[int]) -> tuple[float, float]:
    """(split, whole) bytes of the outputs selective-op saves, over all blocks."""
    parts = [0.0, 0.0]
    for found in op_saved(trace).values():
        for i in found:
            e = trace.events[i]
            for sid, t in zip(e.writes, e.outputs, strict=False):
                parts[sid not in split] += t.nbytes
    return parts[0], parts[1]


def _recomputed_reduces(trace: Trace, region, split: frozenset[int], checkpoint: str) -> float:
    """Row-parallel linear GEMMs (reading a split activation) that a checkpointed
    block runs again, over all blocks: under selective-op only the unsaved ones."""
    kept = op_saved_events(trace) if parse_checkpoint(checkpoint)[0] == "selective-op" else set()
    count = 0
    for i, e in enumerate(trace.events):
        if e.phase != "forward" or i in kept or region(e.module) != "block":
            continue
        operand = activation_operand(e)
        count += operand is not None and e.reads[operand] in split
    return float(count)


def _config_heads(module) -> tuple[int, int]:
    """(attention heads, key/value heads) from a Hugging Face config; (0, 0) without one."""
    config = getattr(module, "config", None)
    heads = getattr(config, "num_attention_heads", 0)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return (heads, kv_heads) if isinstance(heads, int) and isinstance(kv_heads, int) else (0, 0)


def _times(analysis, region, shares) -> dict[str, float]:
    """Seconds per region and phase; the host's waits spread over the rows."""
    host = analysis.step_time_s / analysis.time_s if analysis.time_s else 1.0
    out: dict[str, float] = {}
    for row in analysis.rows:
        phase = str(row.phase)
        t = row.time_s * host
        if phase == "optimizer":
            out["optimizer"] = out.get("optimizer", 0.0) + t
            continue
        where = region(row.module)
        recomputed = phase == "recompute"
        if recomputed:
            out[f"{where}_recompute"] = out.get(f"{where}_recompute", 0.0) + t
            phase = "backward"
        out[f"{where}_{phase}"] = out.get(f"{where}_{phase}", 0.0) + t
        out[f"{where}_split"] = out.get(f"{where}_split", 0.0) + t * split_share(shares, row.module)
        attention = row.family in _ATTENTION_FAMILIES or row.op.startswith(_BATCHED_MATMULS)
        if where == "block" and attention:
            out["block_attention"] = out.get("block_attention", 0.0) + t
        if where == "block" and row.op in (MOE_OP, MOE_BACKWARD_OP):
            key = "block_moe_" + ("recompute" if recomputed else phase)
            out[key] = out.get(key, 0.0) + t
        if row.category == Category.CONTRACTION and not recomputed:
            out["flops"] = out.get("flops", 0.0) + row.flops
    return out


def _outside_params(run, region) -> tuple[int, int]:
    """Parameters before and after the blocks; a tied output layer's copy of the
    embedding counts after them too (Megatron-LM keeps one on the last stage)."""
    pre = post = largest_pre = 0
    for name, p in run.module.named_parameters():
        where = region(name.rpartition(".")[0])
        if where == "pre":
            pre += p.numel()
            largest_pre = max(largest_pre, p.numel())
        elif where == "post":
            post += p.numel()
    config = getattr(run.module, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        post += largest_pre
    return pre, post


def _boundary_elements(trace: Trace, region) -> float:
    """Elements of a block's input (b s h for a transformer layer)."""
    if not trace.blocks:
        return 0.0
    block = trace.blocks[0]
    first = next(
        (e for e in trace.events if e.phase == "forward" and within(e.module, block)), None
    )
    tensors = first.tensors() if first else []
    itemsize = tensors[0].itemsize if tensors else 1
    return trace.module_inputs.get(block, 0) / itemsize


def _moe_fields(trace: Trace) -> dict:
    """The mixture-of-experts facts of `parallel.moe.moe_facts` (none: a dense model)."""
    facts = moe_facts(trace)
    if facts is None:
        return {}
    return {
        "moe_layers": int(facts.moe_layers),
        "experts": int(facts.experts),
        "top_k": int(facts.top_k),
        "expert_params": int(facts.expert_params),
        "moe_tokens": int(facts.tokens),
        "moe_hidden": int(facts.hidden),
    }


def profile(run, session, micro_batch: int) -> ModelProfile:
    """One traced step of `run` at the micro-batch size, summarised for the planner."""
    step = run.with_inputs(resize_inputs(run.inputs, batch=micro_batch))
    recorded = saved_as_run(session.trace(step), run)  # compiled: the partitioner's saved set
    analysis = session.analysis(step)
    region = _Regions(recorded)
    split, shares = split_storages(recorded, roofline_weight(run.spec, recorded.precision))
    n = max(len(recorded.blocks), 1)
    sizes = dict(run.module.named_modules())
    block_params = sum(sum(p.numel() for p in sizes[b].parameters()) for b in recorded.blocks)
    pre_params, post_params = _outside_params(run, region)
    policy = run.precision
    return ModelProfile(
        name=run.name,
        params=recorded.params,
        block_params=block_params,
        blocks=len(recorded.blocks),
        micro_batch=micro_batch,
        tokens_per_sample=int(first_tensor(step.inputs).shape[1]) if step.token_inputs else 0,
        precision=policy,
        optimizer=run.optimizer,
        checkpoint=run.checkpoint,
        **_memory_fields(run, recorded, region, split, n),
        boundary_elements=_boundary_elements(recorded, region),
        activation_itemsize=policy.cast_weight_bytes or policy.master_weight_bytes,
        allocator_share=_allocator_share(recorded, run),
        reduce_bytes=bytes_per_element(run.reduce_dtype),
        **_time_fields(analysis, region, shares, n),
        peak_flops_per_s=_peak(analysis),
        pre_params=pre_params,
        post_params=post_params,
        tensor_parallel=has_linear_layers(recorded, recorded.blocks),
        param_shapes=recorded.trained_shapes,
        **_moe_fields(recorded),
        moe_ep_scales=expert_parallel_scales(recorded, run.spec),
    )


def _memory_fields(run, recorded: Trace, region: _Regions, split, n: int) -> dict:
    """The profile's activations, transients and KV cache (per block where the
    name says so), with the attention heads the KV cache is counted over."""
    saved = _saved(recorded, region, split)
    transient = _transients(recorded, region)
    core_bytes, kv, (heads, kv_heads) = _cores(recorded, region, run.checkpoint)
    if not heads:  # no fused attention call (eager attention): the config says
        heads, kv_heads = _config_heads(run.module)
    op_split, op_whole = _op_saved(recorded, split)
    reduces = _recomputed_reduces(recorded, region, split, run.checkpoint)
    return dict(
        block_activations_bytes=saved["block"] / n,
        block_split_bytes=saved["block_split"] / n,
        block_core_bytes=core_bytes / n,
        block_input_bytes=sum(recorded.module_inputs.get(b, 0) for b in recorded.blocks) / n,
        block_op_split_bytes=op_split / n,
        block_op_replicated_bytes=op_whole / n,
        block_recomputed_reduces=reduces / n,
        pre_activations_bytes=saved["pre"],
        post_activations_bytes=saved["post"],
        post_split_bytes=saved["post_split"],
        block_transient_bytes=transient["block"],
        post_transient_bytes=transient["post"],
        pre_transient_bytes=transient["pre"],
        kv_elements=kv / n,
        heads=heads,
        kv_heads=kv_heads,
    )


def _time_fields(analysis, region: _Regions, shares, n: int) -> dict:
    """The profile's seconds (per block where the name says so), the shares
    of them that tensor parallelism splits, and the model's FLOPs."""
    times = _times(analysis, region, shares)
    block_time = times.get("block_forward", 0.0) + times.get("block_backward", 0.0)
    post_time = times.get("post_forward", 0.0) + times.get("post_backward", 0.0)
    return dict(
        block_forward_s=times.get("block_forward", 0.0) / n,
        block_backward_s=times.get("block_backward", 0.0) / n,
        block_recompute_s=times.get("block_recompute", 0.0) / n,
        block_split_share=times.get("block_split", 0.0) / block_time if block_time else 0.0,
        block_attention_s=times.get("block_attention", 0.0) / n,
        block_moe_forward_s=times.get("block_moe_forward", 0.0) / n,
        block_moe_backward_s=times.get("block_moe_backward", 0.0) / n,
        block_moe_recompute_s=times.get("block_moe_recompute", 0.0) / n,
        pre_forward_s=times.get("pre_forward", 0.0),
        pre_backward_s=times.get("pre_backward", 0.0),
        post_forward_s=times.get("post_forward", 0.0),
        post_backward_s=times.get("post_backward", 0.0),
        post_split_share=times.get("post_split", 0.0) / post_time if post_time else 0.0,
        optimizer_s=times.get("optimizer", 0.0),
        model_flops=times.get("flops", 0.0),
    )


def _allocator_share(trace: Trace, run) -> float:
    """What the caching allocator reserves beyond the live tensors in one step
    of `trace`, per byte of its activations and backward transient: their own
    churn, replayed without the weights and optimizer states (a plan shards
    those; unsharded, a large model's would not fit the replay's GPU)."""
    if run.spec.kind == "cpu":  # no CUDA caching allocator
        return 0.0
    live = checkpoint_plan(trace, run.checkpoint).activations_bytes + transient_bytes(trace)
    if not live:
        return 0.0
    return step_peaks(trace, run.optimizer, run.checkpoint, with_states=False).overhead_bytes / live


def _peak(analysis) -> float:
    dtype = analysis.contraction_dtype
    spec = analysis.spec
    return spec.peak_flops_per_s(dtype) if spec.has_dtype(dtype) else 0.0
