"""A request served with a KV cache: prefill, decode, throughput, memory.

Time. The prompt's forward (prefill) gives the first token; each further
token is a decode step over a cache that grows by one token per step
(FasterTransformer's loop: the context phase, then output_len - 1
generation steps, each with its LM head and sampling). Decode steps are
traced at the first, middle and last cache length and interpolated
linearly between them (attention's reads of K and V grow linearly with the
cache; nothing else depends on it). So:
  ttft = prefill,  tpot = mean decode step,  latency = ttft + (O - 1) x tpot.

A step on one GPU is its rows issued by the engine's host (a launch per
kernel, `host.issue_timeline`; with CUDA graphs one replay per step) to one
stream, the tensor-parallel collectives among them.

Pipeline parallelism (FasterTransformer's static batch): the layers are cut
into pp stages; the batch is split into micro-batches (b/pp when pp divides
it, halved while a micro-batch holds more than 1024 tokens; FT's
`getLocalBatchSize`), which flow through the stages one after another:
  step = sum of the stages' times for one micro-batch
         + (micro-batches - 1) x the slowest stage + (pp - 1) sends.

In-flight batching (`concurrency` C): C requests are decoding at any time,
each at a random point of its output; every iteration runs the decode of
all C and, chunked into it, the prompts of the C / O requests that start per
iteration on average (vLLM's and TensorRT-LLM's mixed steps). The prompt
tokens cost what they cost per token in the traced prefill.
"""

from __future__ import annotations

import numpy as np

from ..errors import DlperfError
from ..kernels.host import issue_timeline
from .collectives import send_time_s
from .steps import Step, StepTracer

# FasterTransformer's `getLocalBatchSize`: a micro-batch holds at most this many tokens.
MICRO_BATCH_TOKENS = 1024


def micro_batches(batch: int, tokens: int, stages: int) -> int:
    """How many micro-batches FasterTransformer splits a batch into for `stages`."""
    if stages <= 1:
        return 1
    local = batch // stages if batch % stages == 0 else batch
    while local * tokens > MICRO_BATCH_TOKENS and local % 2 == 0:
        local //= 2
    return batch // local


def step_time_s(step: Step, engine, stages: int, micro: int, cuda_graphs: bool) -> dict:
    """The wall time of one step of `micro` micro-batches (each `step`) over
    `stages` pipeline stages, and how it splits."""
    spec = engine.spec
    # every forward reads the offloaded weights over the host link (vLLM maps them
    # into the GPU's address space and its kernels read them in place)
    offload_s = offload_time_s(engine.cpu_offload_bytes, spec)
    stage_s = [
        _issue_s(step.rows_of_stage(s, stages), spec, cuda_graphs) + offload_s
        for s in range(stages)
    ]
    send_s = 0.0
    if stages > 1:
        # stage s holds GPUs s*tp .. (s+1)*tp - 1: the stages share a node only when all fit
        across = engine.tp * stages > engine.gpus_per_node
        send_s = send_time_s(
            step.residual_bytes, spec, across, engine.gpus_per_node, engine.node_network_bytes_per_s
        )
    total = sum(stage_s) + (micro - 1) * max(stage_s) + (stages - 1) * send_s
    return {
        "time_s": total,
        "stage_s": stage_s,
        "send_s": send_s,
        "comm_s": sum(r.time_s for r in step.rows if r.family == "collective"),
    }


def offload_time_s(nbytes: float, spec) -> float:
    """Seconds to read `nbytes` of weights held in CPU memory over the host link."""
    if not nbytes:
        return 0.0
    return nbytes / spec.pcie_bandwidth_bytes_per_s


def _issue_s(rows, spec, cuda_graphs: bool) -> float:
    if not rows:
        return 0.0
    return issue_timeline(rows, spec, cuda_graphs=cuda_graphs).step_s


def decode_points(input_len: int, output_len: int) -> list[int]:
    """Cache lengths the decode is traced at: the first, middle and last step's."""
    first, last = input_len, input_len + max(0, output_len - 2)
    return sorted({first, (first + last) // 2, last})


def mean_decode_s(points: list[int], times: list[float], input_len: int, output_len: int) -> float:
    """Mean of the O - 1 decode steps, cache lengths I .. I + O - 2, linear between points."""
    steps = max(1, output_len - 1)
    lengths = input_len + np.arange(steps)
    return float(np.mean(np.interp(lengths, points, times)))


class Timeline:
    """The steps of one request on one deployment, priced once each."""

    def __init__(self, tracer: StepTracer, input_len: int, output_len: int, pp: int, cuda_graphs):
        self.tracer, self.input_len, self.output_len = tracer, input_len, output_len
        self.pp, self.cuda_graphs = pp, cuda_graphs

    def prefill(self, batch: int) -> tuple[Step, dict]:
        micro = micro_batches(batch, self.input_len, self.pp)
        step = self.tracer.step("prefill", batch // micro, self.input_len, 0)
        return step, step_time_s(step, self.tracer.engine, self.pp, micro, self.cuda_graphs)

    def prefill_tokens(self, tokens: int) -> tuple[Step, dict]:
        """One sequence's prefill of `tokens` tokens (an engine step's chunk)."""
        step = self.tracer.step("prefill", 1, tokens, 0)
        return step, step_time_s(step, self.tracer.engine, self.pp, 1, self.cuda_graphs)

    def verify(self, batch: int, new_tokens: int, cached: int) -> tuple[Step, dict]:
        """A decode step over `new_tokens` tokens per sequence (speculative
        decoding's verification of the guesses)."""
        micro = micro_batches(batch, new_tokens, self.pp)
        step = self.tracer.step("decode", batch // micro, new_tokens, cached)
        return step, step_time_s(step, self.tracer.engine, self.pp, micro, self.cuda_graphs)

    def decode(self, batch: int, points: list[int] | None = None):
        """([(step, timing) per traced cache length], cache lengths)."""
        micro = micro_batches(batch, 1, self.pp)
        points = points or decode_points(self.input_len, self.output_len)
        out = []
        for cached in points:
            step = self.tracer.step("decode", batch // micro, 1, cached)
            out.append(
                (step, step_time_s(step, self.tracer.engine, self.pp, micro, self.cuda_graphs))
            )
        return out, points


def check_lengths(input_len: int, output_len: int, batch: int, concurrency: int | None) -> None:
    for name, value in (
        ("--input-len", input_len),
        ("--output-len", output_len),
        ("--batch", batch),
    ):
        if not isinstance(value, int) or value <= 0:
            raise DlperfError(f"{name} must be a positive whole number, not {value!r}")
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency <= 0):
        raise DlperfError(f"--concurrency must be a positive whole number, not {concurrency!r}")
