"""One serving step (a prefill or a decode forward) on one GPU: traced, priced
as an inference engine runs it, and laid out layer by layer.

- Traced: the model's forward on fake tensors with a `ServeCache` (cache.py),
  so any architecture the tracer supports is served as it computes.
- Priced: each op by the op registry and `pricing.time`, as `analysis` does,
  with the engine's changes applied in order: a model's eager attention as
  the engine's fused kernel (`eager_attention`, unless --attention eager or
  math asks for the model's own code), element-wise chains fused
  (`compiling.fuse`; FasterTransformer, TensorRT-LLM and vLLM run hand-fused
  or compiled kernels: bias+activation, residual+norm), the projections that
  read one input as one GEMM and SiLU x up as one kernel
  (`merged_projections`, as vLLM loads and runs them), one GPU's share under
  tensor parallelism (`sharding.shard`), then the precision (`quant.quantize`).
  The collectives tensor parallelism needs are rows of their own, after the
  op that waits for them (`collectives`); the sampler runs after the model.
- Laid out: large models are traced with three of their repeated blocks (the
  first, a middle one and the last, which see the same neighbours as any
  other) and the middle block's rows repeated for the others, once the first
  two are checked identical op for op; else the whole model is traced.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from ..analysis import OpRow, dtype_of, op_row
from ..compiling import fuse
from ..hardware import HardwareSpec
from ..kernels.pricing import GemmTimer, time
from ..kinds import Bound, Category, Phase
from ..models import LoadedModel, load_model
from ..ops import CostContext, costed, fallback
from ..run import Run, Session
from ..tracing import repeated_blocks, within
from .cache import step_inputs
from .collectives import collective_time_s, custom_all_reduce_s
from .eager_attention import engine_masks, fuse_eager_attention
from .merged_projections import merge_projections
from .quant import Scheme, quantize
from .sharding import shard

TRACED_BLOCKS = 3  # first, middle, last: the middle one stands for the others


@dataclass(frozen=True)
class Engine:
    """How the serving engine runs a step, and on what."""

    spec: HardwareSpec
    scheme: Scheme
    kv_dtype: str
    tp: int = 1
    fused: bool = True
    gpus_per_node: int = 8
    node_network_bytes_per_s: float | None = None
    sampling: str = "greedy"  # "greedy" (what serving benchmarks run) or "top-p"
    # tensor parallelism's all-reduces as vLLM runs them on NVLink (its own
    # kernel, `collectives.custom_all_reduce_s`) rather than through NCCL
    custom_all_reduce: bool = False
    # weights per GPU held in CPU memory (vLLM's --cpu-offload-gb), read every forward
    cpu_offload_bytes: float = 0.0


@dataclass
class Step:
    """One forward of the engine on one GPU, its rows in the order they run."""

    kind: str  # "prefill" or "decode"
    batch: int
    new_tokens: int  # per sequence
    cached: int  # tokens already in the cache per sequence
    rows: list[OpRow]
    block_of: list[int]  # per row: its block, -1 before the blocks, `blocks` after
    blocks: int
    kv_shapes: list[tuple[int, int, int]]  # per layer of the whole model
    unsupported: dict[str, int] = field(default_factory=dict)
    # the largest working set of one op: its outputs and the intermediate
    # tensors it reads (weights, buffers and the cache excluded)
    activation_bytes: float = 0.0

    @property
    def residual_bytes(self) -> float:
        """The residual stream (b x tokens x hidden, the embedding's output, 2 B an
        element): what a step holds around its largest op, and passes between
        pipeline stages."""
        for r in self.rows:
            if r.op.startswith("aten.embedding") and r.shapes:
                return float(self.batch * self.new_tokens * r.shapes[0][-1] * 2)
        return 0.0

    @property
    def gpu_time_s(self) -> float:
        return float(sum(r.time_s for r in self.rows))

    def rows_of_stage(self, stage: int, stages: int) -> list[OpRow]:
        """The rows one pipeline stage runs: its share of the blocks, the first
        stage what runs before them, the last what runs after."""
        out = []
        for row, block in zip(self.rows, self.block_of, strict=True):
            if stage_of_block(block, self.blocks, stages) == stage:
                out.append(row)
        return out


def stage_of_block(block: int, blocks: int, stages: int) -> int:
    if block < 0:
        return 0
    if block >= blocks:
        return stages - 1
    return min(stages - 1, block * stages // max(1, blocks))


# -- the models traced ----------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _load(name: str) -> LoadedModel:
    return load_model(name, batch=1, seq_len=1)


def reduced_model(loaded: LoadedModel) -> tuple[LoadedModel, int]:
    """(the model to trace, its number of repeated blocks in the whole model):
    a Hugging Face model of more than TRACED_BLOCKS layers is traced with
    TRACED_BLOCKS (the config's layer count set, nothing else changed)."""
    blocks = _block_count(loaded.module)
    if not loaded.name.startswith("hf:") or blocks <= TRACED_BLOCKS:
        return loaded, blocks
    spec = loaded.name.removeprefix("hf:")
    name = f"hf:{spec}{',' if ':' in spec else ':'}layers={TRACED_BLOCKS}"
    return _load(name), blocks


def _block_count(module: nn.Module) -> int:
    found = repeated_blocks(module)
    if not found:
        return 0
    parent = found[0].rsplit(".", 1)[0]
    return sum(1 for b in found if b.rsplit(".", 1)[0] == parent)


# -- pricing ------------------------------------------------------------------


def price_trace(recorded, engine: Engine, tp: int | None = None):
    """(rows, unsupported ops, sharded storages) of a trace as the engine runs
    it on one GPU (`sharding.shard` says which storages a GPU holds 1/tp of)."""
    ctx = CostContext(recorded.precision)
    priced, unsupported = [], Counter()
    for event in recorded.events:
        found = costed(event, ctx)
        if found is None:
            unsupported[event.op] += 1
            found = fallback(event)
        priced.append((event, found))
    if engine.fused:
        priced, _ = fuse(priced, recorded)
        priced = merge_projections(priced)
    priced, collectives, sharded = shard(priced, engine.tp if tp is None else tp)
    priced = quantize(priced, engine.scheme, engine.kv_dtype, recorded.blocks)
    timer = GemmTimer(engine.spec)
    timer.prepare([g for _, found in priced for g in found.cost.gemms])
    rows = [_row(event, found, engine.spec, timer, unsupported) for event, found in priced]
    for c in sorted(collectives, key=lambda c: c.after, reverse=True):
        rows.insert(c.after + 1, collective_row(c.kind, c.nbytes, rows[c.after].module, engine))
    return rows, dict(unsupported), sharded


def _row(event, found, spec: HardwareSpec, timer: GemmTimer, unsupported) -> OpRow:
    cost = found.cost
    tensors = event.tensors()
    dtype = dtype_of(tensors, event, cost)
    timing = time(cost, spec, dtype, timer)
    labelled = found._replace(category=found.category or Category.OTHER, family=found.family or "")
    row = op_row(event, tensors, labelled, timing, dtype, event.op not in unsupported)
    row.phase = Phase.FORWARD
    row.host_ops = 0  # an engine's C++ runtime: a launch per kernel, no framework op
    row.weight_gemms = cost.gemms  # the GEMMs as costed (a GEMV's too)
    row.attention_shapes = cost.attention  # a fused attention call, as the engine runs it
    return row


def collective_row(kind: str, nbytes: float, module: str, engine: Engine, ranks=None) -> OpRow:
    """A collective as a row of the step: one NCCL kernel the next op waits for."""
    ranks = ranks or engine.tp
    custom = None
    if engine.custom_all_reduce and kind == "all_reduce" and ranks <= engine.gpus_per_node:
        custom = custom_all_reduce_s(nbytes, ranks, engine.spec)
    how = "the engine's own kernel over NVLink" if custom is not None else "NCCL's cost model"
    seconds = custom if custom is not None else collective_time_s(
        kind, nbytes, ranks, engine.spec, engine.gpus_per_node, engine.node_network_bytes_per_s
    )
    row = OpRow(
        module=module,
        op=f"nccl.{kind}",
        phase=Phase.FORWARD,
        category=Category.OTHER,
        family="collective",
        shapes=[],
        dtype=engine.scheme.base,
        flops=0.0,
        bytes=float(nbytes),
        arithmetic_intensity=0.0,
        bound=Bound.LATENCY,
        time_s=seconds,
        kernels=1,
        notes=[f"{kind} of {nbytes / 1e3:.1f} kB over {ranks} GPUs ({how})"],
    )
    row.host_ops = 0
    return row


# -- layout over the blocks --------------------------------------------------------


def _anchors(rows: list[OpRow], blocks: list[str]) -> list[int] | None:
    """Index of each traced block's first contraction (GEMMs are never fused
    across blocks, so they mark where a block's period starts)."""
    found = []
    for b in blocks:
        index = next(
            (
                i
                for i, r in enumerate(rows)
                if r.category == Category.CONTRACTION and within(r.module, b)
            ),
            None,
        )
        if index is None:
            return None
        found.append(index)
    return found if found == sorted(found) else None


def _signature(rows: list[OpRow]) -> list[tuple]:
    return [(r.op, r.kernels, r.flops, r.bytes, r.time_s) for r in rows]


def expand(rows: list[OpRow], traced_blocks: list[str], blocks: int):
    """(rows, block of each row) of the whole model from a trace of
    TRACED_BLOCKS blocks, or None when the traced blocks are not identical."""
    anchors = _anchors(rows, traced_blocks)
    if anchors is None or len(anchors) != TRACED_BLOCKS:
        return None
    a0, a1, a2 = anchors
    unit = rows[a1:a2]
    if _signature(rows[a0:a1]) != _signature(unit):
        return None
    out = rows[:a1] + unit * (blocks - TRACED_BLOCKS + 1) + rows[a2:]
    tags = [-1] * a0 + [0] * (a1 - a0)
    for copy in range(blocks - TRACED_BLOCKS + 1):
        tags += [1 + copy] * len(unit)
    last = blocks - 1
    tail = rows[a2:]
    tags += [last if _in_blocks(r, traced_blocks) else blocks for r in tail]
    return out, tags


def _in_blocks(row: OpRow, blocks: list[str]) -> bool:
    return any(within(row.module, b) for b in blocks) or row.family == "collective"


def block_tags(rows: list[OpRow], blocks: list[str]) -> list[int]:
    """The block of each row of a whole-model trace: -1 before the first block,
    len(blocks) after the last, else the block it runs in (or last ran in)."""
    index = [next((j for j, b in enumerate(blocks) if within(r.module, b)), None) for r in rows]
    inside = [i for i, j in enumerate(index) if j is not None]
    if not inside:
        return [-1] * len(rows)
    tags, current = [], -1
    for i, j in enumerate(index):
        current = j if j is not None else current
        tags.append(len(blocks) if i > inside[-1] and rows[i].family != "collective" else current)
    return tags


# -- one step -----------------------------------------------------------------------


class StepTracer:
    """Traces and prices the steps of one model on one engine, sharing a session."""

    def __init__(self, run: Run, engine: Engine, session: Session):
        self.run, self.engine, self.session = run, engine, session
        self.traced, self.blocks = reduced_model(run.model)
        self._sampler: dict[tuple, list[OpRow]] = {}

    def step(self, kind: str, batch: int, new_tokens: int, cached: int) -> Step:
        inputs = step_inputs(self.run.model, batch, new_tokens, cached)
        recorded, kv = self._trace(self.traced, inputs)
        rows, unsupported, sharded = price_trace(recorded, self.engine)
        laid = None
        if self.traced is not self.run.model:
            laid = expand(rows, recorded.blocks, self.blocks)
            if laid is None:  # blocks differ: trace the whole model
                inputs = step_inputs(self.run.model, batch, new_tokens, cached)
                recorded, kv = self._trace(self.run.model, inputs)
                rows, unsupported, sharded = price_trace(recorded, self.engine)
        if laid is None:
            laid = rows, block_tags(rows, recorded.blocks)
        rows, tags = laid
        if len(kv) < self.blocks:  # a reduced trace: every block caches alike
            kv = kv[:1] * (self.blocks - len(kv) + 1) + kv[1:]
        sampler = self.sampler_rows(batch, _vocab(rows))
        rows, tags = rows + sampler, tags + [self.blocks] * len(sampler)
        step = Step(kind, batch, new_tokens, cached, rows, tags, self.blocks, kv, unsupported)
        step.activation_bytes = working_set_bytes(recorded, sharded, self.engine.tp)
        return step

    def _trace(self, loaded: LoadedModel, inputs: dict):
        run = dataclasses.replace(self.run, model=dataclasses.replace(loaded, inputs=inputs))
        recorded = self.session.trace(run)
        # The model writes its layers' shapes into the cache it is given while it runs;
        # a trace the session already held ran with another cache: keep them with it.
        key = ("kv_shapes", id(recorded))
        shapes = inputs["past_key_values"].kv_shapes()
        if shapes:
            self.session.beside_trace[key] = shapes
        shapes = shapes or self.session.beside_trace.get(key, [])
        if self.run.attention not in ("eager", "math"):  # engines run their fused kernels
            recorded = engine_masks(fuse_eager_attention(recorded, self.run.attention))
        return recorded, shapes

    def sampler_rows(self, batch: int, vocab: int) -> list[OpRow]:
        """The engine's sampling of one token per sequence from fp32 logits, traced."""
        if vocab <= 0:
            return []
        key = (batch, vocab)
        if key not in self._sampler:
            logits = torch.empty(batch, vocab, dtype=torch.float32, device="meta")
            sampler = SAMPLERS[self.engine.sampling]()
            loaded = LoadedModel("sampler", sampler, (logits,), "module")
            run = dataclasses.replace(self.run, model=loaded)
            rows, _, _ = price_trace(self.session.trace(run), self.engine, tp=1)
            self._sampler[key] = rows
        return self._sampler[key]


def working_set_bytes(recorded, sharded: frozenset[int] | set[int] = frozenset(), tp: int = 1):
    """The largest working set of one op of a trace on one GPU: what it writes
    and the intermediate tensors it reads (storages some op of the trace
    wrote), a sharded storage at 1/tp of its size; weights, buffers and the
    preallocated cache are read, never written."""
    written = {sid for e in recorded.events for sid in e.writes}

    def held(sid: int, t) -> float:
        return t.nbytes / tp if sid in sharded else float(t.nbytes)

    largest = 0.0
    for e in recorded.events:
        reads = zip(e.reads, e.tensors(), strict=False)
        moved = sum(held(sid, t) for sid, t in reads if sid in written and sid not in e.writes)
        ids = e.writes if len(e.writes) == len(e.outputs) else (-1,) * len(e.outputs)
        made = sum(held(sid, t) for sid, t in zip(ids, e.outputs, strict=True))
        largest = max(largest, moved + made)
    return float(largest)


def _vocab(rows: list[OpRow]) -> int:
    """The LM head's output features: the last linear GEMM's n (before TP)."""
    for r in reversed(rows):
        if r.gemms and r.family == "matmul" and r.shapes:
            return int(r.shapes[-1][-1])
    return 0


class GreedySampler(nn.Module):
    """Greedy decoding, as serving benchmarks run (temperature 0): the argmax of
    each row of the logits, one reduction over the vocabulary."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)


class TopPSampler(nn.Module):
    """Top-p sampling as vLLM's sampler runs it: sort the logits, mask the tail
    beyond p of the probability mass, scatter back, softmax, and draw one
    token per row with the exponential race (probs / Exp(1), argmax)."""

    def __init__(self, top_p: float = 0.9):
        super().__init__()
        self.top_p = top_p

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        ordered, index = logits.float().sort(dim=-1)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        ordered = ordered.masked_fill(cumulative <= 1 - self.top_p, float("-inf"))
        logits = ordered.scatter(-1, index, ordered)
        probs = logits.softmax(dim=-1)
        race = torch.empty_like(probs).exponential_()
        return probs.div(race).argmax(dim=-1)


SAMPLERS = {"greedy": GreedySampler, "top-p": TopPSampler}
