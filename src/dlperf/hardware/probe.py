"""Probes of the local device's achievable rates, used to build its spec.

Every probe keeps to a time budget (seconds of wall time), so that the first
use of a CPU as a device takes seconds, not minutes: matmul sizes grow only
while one more size fits in what is left of the budget. Each keeps its
fastest sample: on a shared machine the slower ones are the disturbed ones
(two OpenMP threads with another process on their cores run tiny ops 100
times slower).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from ..dtypes import torch_dtype
from ..errors import DlperfError
from .timing import time_callable

MATMUL_SIZES = (256, 512, 1024, 2048)
# Without bf16 units a CPU converts every element: slow at any size, so one small size says it.
EMULATED_BF16_SIZE = 256


def native_bf16() -> bool:
    """Whether this CPU has bf16 arithmetic (AVX512-BF16, AMX, Arm BF16)."""
    caps = {}
    with contextlib.suppress(AttributeError, RuntimeError):  # older torch: read cpuinfo
        caps = torch.cpu.get_capabilities()
    if caps.get("avx512_bf16") or caps.get("amx_bf16"):
        return True
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set(text.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else None


def matmul_flops_per_s(
    dtype: str = "fp32",
    size: int | None = None,
    device: str = "cpu",
    budget_s: float = 4.0,
    sizes: tuple[int, ...] = MATMUL_SIZES,
) -> float:
    """Best achieved FLOP/s of square matmuls (2 n^3 FLOPs per call), over sizes."""
    if size is not None:
        sizes = (size,)
    sync = _sync(device)
    deadline = time.perf_counter() + budget_s
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(torch_dtype(dtype))
        b = torch.randn(n, n, device=device).to(torch_dtype(dtype))
        start = time.perf_counter()
        torch.mm(a, b)
        if sync:
            sync()
        once = time.perf_counter() - start
        left = deadline - time.perf_counter()
        # the first call of a size is the slowest: 3 more must fit in what is left
        if best and 3 * once > left:
            break
        m = time_callable(
            lambda a=a, b=b: torch.mm(a, b),
            warmup=1,
            repeats=5,
            min_sample_s=min(0.05, max(left, 0.0) / 10),
            synchronize=sync,
            budget_s=max(left, 0.0),
        )
        best = max(best, 2.0 * n**3 / m.min_s)
    return best


def stream_bandwidth_bytes_per_s(
    tensor_bytes: int = 64 * 2**20, device: str = "cpu", budget_s: float = 1.0
) -> float:
    """Streaming rate of the commonest memory-bound op, an element-wise add:
    each call reads two buffers and writes a third (bytes counted as a kernel
    model counts them: each tensor once). Buffers much larger than the caches
    give the DRAM rate; buffers that fit in the last-level cache, its rate."""
    count = max(1, tensor_bytes // 4)
    x = torch.ones(count, dtype=torch.float32, device=device)
    y = torch.ones_like(x)
    out = torch.empty_like(x)
    m = time_callable(
        lambda: torch.add(x, y, out=out),
        warmup=2,
        repeats=5,
        min_sample_s=min(0.01, budget_s / 10),
        synchronize=_sync(device),
        budget_s=budget_s,
    )
    return 3.0 * count * 4 / m.min_s


def first_touch_bytes_per_s(tensor_bytes: int = 64 * 2**20, budget_s: float = 0.5) -> float:
    """Rate at which the OS hands a CPU process fresh pages: filling a newly
    allocated tensor (above glibc's mmap threshold: new pages every time) less
    filling one already touched, per byte."""
    count = max(1, tensor_bytes // 4)
    warm = torch.empty(count, dtype=torch.float32)
    kept = time_callable(lambda: warm.fill_(1.0), warmup=1, repeats=5, budget_s=budget_s / 2)
    fresh = time_callable(
        lambda: torch.empty(count, dtype=torch.float32).fill_(1.0),
        warmup=1,
        repeats=5,
        budget_s=budget_s / 2,
    )
    extra = fresh.min_s - kept.min_s
    return count * 4 / extra if extra > 0 else 0.0


def random_elements_per_s(budget_s: float = 0.3) -> float:
    """Rate of dropout's random mask on this CPU: `bernoulli_` over 4M elements
    (PyTorch's CPU generator draws them one at a time)."""
    x = torch.empty(2**22)
    m = time_callable(lambda: x.bernoulli_(0.9), warmup=1, repeats=5, budget_s=budget_s)
    return x.numel() / m.min_s


def call_latency_s(device: str = "cpu", budget_s: float = 0.5) -> float:
    """Time of one framework call that does almost nothing."""
    x = torch.ones(1, device=device)
    m = time_callable(
        lambda: torch.add(x, x),
        warmup=10,
        repeats=9,
        min_sample_s=min(0.02, budget_s / 12),
        budget_s=budget_s,
    )
    return m.min_s


def _tiny_network() -> nn.Module:
    """Layers of the usual kinds at sizes where every kernel is negligible."""
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.1)]
    return nn.Sequential(*layers, nn.Linear(16, 4))


class StepTracer(NamedTuple):
    """How dlperf's tracer sees a training step: the ops it records for the
    model on an input (detaches aside) and the loss it differentiates."""

    recorded_ops: Callable[[nn.Module, torch.Tensor], int]
    loss_of: Callable[[object], torch.Tensor]


# The tracer sits above hardware, so `tracing` hands itself in when imported
# (and importing any part of dlperf imports the package, and so tracing, first).
_tracer: StepTracer | None = None


def use_tracer(tracer: StepTracer) -> None:
    global _tracer
    _tracer = tracer


def eager_step_s_per_op(budget_s: float = 2.0) -> float:
    """Seconds per recorded op of an eager training step whose kernels do nothing.

    A training step (forward, loss, backward) of a network of tiny layers is
    timed for real and divided by the number of ops dlperf records for the
    same step: the host's cost per op (Python, dispatch, autograd) that every
    op of an eager step pays on a CPU, where nothing overlaps with it.
    """
    if _tracer is None:
        raise DlperfError("the CPU probe needs dlperf's tracer: import dlperf.tracing first")
    model = _tiny_network()
    x = torch.randn(4, 16)
    ops = _tracer.recorded_ops(model, x)

    def step():
        loss = _tracer.loss_of(model(x))
        loss.backward()
        model.zero_grad(set_to_none=True)

    m = time_callable(step, warmup=3, repeats=15, budget_s=budget_s)
    return m.min_s / max(ops, 1)


# The attention the probe times: PyTorch's CPU flash kernel, causal, fp32
# (batch, heads, sequence, head size): a small Llama's layer at sequence 256.
ATTENTION_PROBE_SHAPE = (4, 8, 256, 64)


def attention_seconds(budget_s: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of causal SDPA at `ATTENTION_PROBE_SHAPE` in
    fp32: the CPU flash kernel, as a training step runs it (forward with the
    log-sum-exp kept, then backward; backward timed as the pair less forward)."""
    import torch.nn.functional as F

    b, h, s, d = ATTENTION_PROBE_SHAPE
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def both():
        forward().backward(grad)

    fwd = time_callable(forward, warmup=2, repeats=5, budget_s=budget_s / 3)
    pair = time_callable(both, warmup=2, repeats=5, budget_s=2 * budget_s / 3)
    return fwd.min_s, max(pair.min_s - fwd.min_s, 1e-9)


def conv_flops_per_s(budget_s: float = 3.0) -> list[tuple[float, float]]:
    """(GEMM reduction size C*R*S, FLOP/s) of convolutions forward and backward.

    One with few input channels (a network's first layer), one of the common
    3x3 kind: the rate of a convolution depends mostly on the length of its
    dot products.
    """
    points = []
    cases = ((4, 3, 64, 32), (4, 32, 32, 64))  # batch, in channels, image size, out channels
    for batch, cin, hw, cout in cases:
        x = torch.randn(batch, cin, hw, hw, requires_grad=True)
        conv = nn.Conv2d(cin, cout, 3, padding=1)
        flops = 3 * 2.0 * batch * cout * hw * hw * cin * 9  # forward, grad input, grad weight

        def step(x=x, conv=conv):
            conv(x).sum().backward()

        m = time_callable(step, warmup=1, repeats=5, budget_s=budget_s / len(cases))
        points.append((float(cin * 9), flops / m.min_s))
    return points
