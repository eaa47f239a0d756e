"""The serving simulator on cases whose answer is derived by hand, and its speed.

Deployment: Llama-2-7B (`hf:llama-7b`), fp16, one H100 SXM, vLLM's defaults
for it (8192 tokens and 1024 sequences a step, 0.9 of memory, blocks of 16,
CUDA graphs); every request 512 prompt and 128 output tokens.

1. Far below capacity (0.05 requests/s: a request every 20 s, each done in
   about 1 s): no request meets another, so its TTFT is one 512-token
   prefill and its TPOT a batch-1 decode step: `dlperf serve --batch 1
   --input-len 512 --output-len 128 --cuda-graphs` says both directly.
2. Far above capacity (all at once): the engine holds as many requests as
   its KV cache has blocks for (640 tokens = 40 blocks each) and is busy all
   the time: its output throughput should be what `serve --concurrency B`
   (the steady state of B requests in flight) gives at that B.
3. Speed: 10^4 requests at three rates, the step table's tracing apart.

Run: python bench/serve_simulator.py
"""

from __future__ import annotations

import math
import time

from dlperf.run import Session
from dlperf.serving import serve
from dlperf.serving.simulate import Simulator

MODEL, GPU, IN, OUT = "hf:llama-7b", "h100-sxm5-80gb", 512, 128
DATASET = f"random:in={IN},out={OUT}"


def main() -> None:
    session = Session()
    started = time.perf_counter()
    sim = Simulator(MODEL, dataset=DATASET, num_prompts=2000, gpu=GPU, precision="fp16",
                    cuda_graphs=True, session=session)  # fmt: skip
    print(f"deployment built in {time.perf_counter() - started:.1f} s")

    quiet = sim.run(0.05)
    alone = serve(MODEL, gpu=GPU, precision="fp16", input_len=IN, output_len=OUT, batch=1,
                  cuda_graphs=True, session=session)  # fmt: skip
    print("\n1. far below capacity (0.05 requests/s)")
    for name, simulated, static in (
        ("TTFT", quiet.ttft["p50"], alone.ttft_s),
        ("TPOT", quiet.tpot["p50"], alone.tpot_s),
    ):
        print(f"   {name} median {simulated * 1e3:8.2f} ms   serve --batch 1 {static * 1e3:8.2f} ms"
              f"   {simulated / static - 1:+.2%}")  # fmt: skip

    burst = sim.run(math.inf)
    per_request = math.ceil((IN + OUT) / sim.limits.block_size)
    held = sim.limits.kv_blocks // per_request
    steady = serve(MODEL, gpu=GPU, precision="fp16", input_len=IN, output_len=OUT, batch=1,
                   cuda_graphs=True, concurrency=held, session=session).concurrency  # fmt: skip
    print("\n2. far above capacity (2000 requests at once)")
    print(
        f"   KV cache {sim.limits.kv_blocks} blocks / {per_request} a request = {held} in "
        f"flight (mean batch simulated {burst.mean_batch:.0f}, preemptions {burst.preemptions})"
    )
    print(
        f"   output tokens/s simulated {burst.output_throughput:9.0f}   "
        f"serve --concurrency {held} {steady['output_tokens_per_s']:9.0f}   "
        f"{burst.output_throughput / steady['output_tokens_per_s'] - 1:+.1%}"
    )

    print("\n3. speed: 10^4 requests")
    big = Simulator(MODEL, dataset=f"random:in={IN},out={OUT},range=0.5", num_prompts=10_000,
                    gpu=GPU, precision="fp16", cuda_graphs=True, session=session)  # fmt: skip
    for rate in (2.0, 30.0, math.inf):
        traced = big.costs.traced
        t0 = time.perf_counter()
        report = big.run(rate)
        seconds = time.perf_counter() - t0
        print(
            f"   rate {rate:>4}: {report.steps:7d} steps in {seconds:5.2f} s "
            f"({big.costs.traced - traced} steps traced for the table meanwhile); "
            f"TTFT p99 {report.ttft['p99'] * 1e3:8.1f} ms, TPOT p99 "
            f"{report.tpot['p99'] * 1e3:6.2f} ms, {report.output_throughput:8.0f} tokens/s"
        )


if __name__ == "__main__":
    main()
