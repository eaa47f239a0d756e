"""dlperf: why is my model slow on this GPU, and what should I change?

The public API (names are a contract, see docs/design.md):

- `RunConfig`: the run as one value (model and inputs, device, precision,
  the step, the parallel plan, the serving engine), taken by every function
  below (`analyze(model, RunConfig.build(gpu="h100"))`; keywords build one);
  `RunConfig.from_file(path)` reads a framework's config file.
- `gpu(name_or_path)` / `gpus()`: hardware specs from the bundled catalogue,
  a user's TOML/JSON spec file, or "cpu" for the probed local machine.
- `gemm(m, n, k, dtype=..., gpu=..., batch=1)`: the GEMM performance model.
- `analyze(model, inputs, gpu=..., precision=..., training=True)`: every op
  of a training or inference step, traced on fake tensors and timed.
- `memory(model, inputs, gpu=..., precision=..., optimizer=..., checkpoint=...)`:
  the memory of one training step per GPU and what fits.
- `plan(model, inputs, gpu=..., gpus=N)`: data/tensor/pipeline/ZeRO plans, ranked.
- `advise(model, inputs, gpu=..., precision=...)`: the guides' rules with
  predicted gains; `fix(model, inputs, rules=None, ...)` applies the
  mechanical ones and returns a new model with the same outputs.
- `measure(model, inputs, device="cpu", ...)`: the model run for real here,
  each op measured beside its prediction.
- `trace(path, gpu=None)`: a PyTorch profiler trace of a real GPU run, kernel
  by kernel against the roofline.
- `compare(model, trace, ...)`: a profiler trace of the model's run (or a
  folder of one per rank) beside its prediction, per op, module and category;
  `calibrate_trace(trace, model, out, ...)` fits the device's corrections from
  it and writes a spec file that every verb takes as `gpu`.
- `serve(model, gpu=..., precision=..., input_len=..., output_len=..., batch=...)`:
  a decoder LLM served with a KV cache (TTFT, TPOT, tokens/s, memory, max batch).
- `simulate(model, dataset=..., num_prompts=..., request_rate=..., slo=...)`:
  a serving benchmark (requests at a rate, continuous batching, latency
  percentiles, goodput, the largest rate meeting an SLO).
"""

from .advice.engine import advise, fix
from .analysis import Analysis
from .api import (
    analyze,
    calibrate_trace,
    compare,
    measure,
    memory,
    plan,
    report,
    serve,
    simulate,
)
from .api import profile_trace as trace
from .errors import DlperfError
from .hardware import HardwareSpec, gpu, gpus
from .kernels.gemm import GemmResult, gemm
from .run_config import RunConfig

__all__ = [
    "Analysis",
    "DlperfError",
    "GemmResult",
    "HardwareSpec",
    "RunConfig",
    "advise",
    "analyze",
    "calibrate_trace",
    "compare",
    "fix",
    "gemm",
    "gpu",
    "gpus",
    "measure",
    "memory",
    "plan",
    "report",
    "serve",
    "simulate",
    "trace",
]
__version__ = "0.1.0"
