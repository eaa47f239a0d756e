"""Serving a decoder LLM with a KV cache (`dlperf serve`): prefill, decode,
quantized weights, tensor and pipeline parallelism, batch sizing.

- cache.py: the KV cache a traced step runs with, and each step's inputs;
- steps.py: one step traced, priced as an inference engine runs it (fused
  kernels, one GPU's share under tensor parallelism, the precision), laid
  out over the model's blocks, the sampler after it;
- sharding.py: tensor parallelism from the trace's data flow;
- quant.py: inference precisions and the KV cache's dtype;
- collectives.py: NCCL's own cost model of its collectives;
- timeline.py: prefill, decode steps, pipeline stages, a request's times;
- memory.py: weights, KV cache, activations, workspace; the largest batch;
- result.py: the report and its analysis (top ops, bounds);
- eager_attention.py: a model's eager attention as the engine's fused kernel;
- deployment.py: the model, engine and memory plan `serve` and `simulate` share;
- api.py: `serve(...)`, the public entry point (`dlperf.serve`);
- workload.py: requests of a dataset arriving at a rate;
- step_costs.py: an engine step's price, tabulated from traced steps;
- scheduler.py: continuous batching over a paged KV cache, step by step;
- simulate.py: `simulate(...)`, a serving benchmark (`dlperf.simulate`).
"""

from .api import serve
from .result import PhaseReport, ServeReport

__all__ = ["PhaseReport", "ServeReport", "serve"]
