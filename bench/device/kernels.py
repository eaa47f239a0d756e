"""Time the kernels issues 34 and 35 price, on a lent CUDA GPU, and write raw figures.

Run on the device machine (torch with CUDA; nothing of dlperf is imported):

    python3 bench/device/kernels.py OUT.jsonl

Each line of OUT.jsonl is one timed kernel: its group, shape, dtype, backend and
median milliseconds (CUDA events around the call, L2 flushed before each call so
weights stream from HBM as they do in a model's step). The first line is the
machine: GPU, driver, torch, CUDA. `bench/device_kernels.py` prices the same
shapes with dlperf and prints the error beside these figures.

Groups, and why each is measured:
- gemm_serving: bf16 GEMMs of Llama-class layers at M = 1..8192 tokens (decode
  steps stream weights at small M; mixed steps run prefill chunks of 300-2000).
- gemm_training: bf16 and fp8 (torch._scaled_mm, per-tensor scales, fast and
  split accumulation) GEMMs of training layers: forward, dgrad and wgrad shapes.
- attention_training: SDPA causal forward and forward+backward per backend.
- attention_decode: SDPA of one query token against a KV cache (GQA).
- grouped_gemm: MoE experts' GEMMs as one grouped kernel, a loop of GEMMs, and one
  dense GEMM of the same FLOPs.
- elementwise: RMSNorm, SiLU-and-mul, a copy: the memory-bound kernels.
- launch: per-kernel time of tiny kernels launched eagerly and replayed in a graph.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from functools import partial

import torch
import torch.nn.functional as F

FLUSH_BYTES = 256 * 2**20  # five times an H100's 50 MB L2
TARGET_MS = 25.0  # timed milliseconds per kernel, about


def machine() -> dict:
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "group": "machine",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


class Timer:
    def __init__(self):
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def median_ms(self, fn) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        guess_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
        reps = int(min(200, max(10, TARGET_MS / guess_ms)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends, strict=True):
            self.flush.zero_()  # cold L2; the GPU is busy with it while the call is queued
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        return times[len(times) // 2]


def emit(out, row: dict) -> None:
    out.write(json.dumps(row) + "\n")
    out.flush()


# Layers as (name, N, K): the weight is N x K, a token row is K wide.
SERVING_LAYERS = {
    "llama3-8b": [
        ("qkv", 6144, 4096),
        ("o", 4096, 4096),
        ("gate_up", 28672, 4096),
        ("down", 4096, 14336),
    ],
    "llama2-7b": [
        ("qkv", 12288, 4096),
        ("o", 4096, 4096),
        ("gate_up", 22016, 4096),
        ("down", 4096, 11008),
    ],
    "codellama34b-tp2": [
        ("qkv", 5120, 8192),
        ("o", 8192, 4096),
        ("gate_up", 22016, 8192),
        ("down", 8192, 11008),
    ],
    "llama70b-tp4": [
        ("qkv", 2560, 8192),
        ("o", 8192, 2048),
        ("gate_up", 14336, 8192),
        ("down", 8192, 7168),
    ],
}
SERVING_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 4096, 8192]

TRAINING_LAYERS = {
    "llama3-8b": SERVING_LAYERS["llama3-8b"],
    "llama3-70b-tp4": SERVING_LAYERS["llama70b-tp4"],
    "gpt3-175b-tp4": [
        ("qkv", 9216, 12288),
        ("o", 12288, 3072),
        ("fc1", 12288, 12288),
        ("fc2", 12288, 12288),
    ],
}
TRAINING_TOKENS = [8192]


def gemm_serving(timer, out):
    for model, layers in SERVING_LAYERS.items():
        for name, n, k in layers:
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            for m in SERVING_M:
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                ms = timer.median_ms(partial(torch.mm, a, w.t()))
                emit(
                    out,
                    {
                        "group": "gemm_serving",
                        "model": model,
                        "layer": name,
                        "m": m,
                        "n": n,
                        "k": k,
                        "dtype": "bf16",
                        "ms": ms,
                    },
                )


def _fp8(x):
    return x.to(torch.float8_e4m3fn)


def _scaled_mm(a8, b8, scale, fast):
    """a8 @ b8.T in fp8 with bf16 out; b8.T is column-major, as cuBLASLt's fp8 GEMM wants."""
    return torch._scaled_mm(
        a8, b8.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16, use_fast_accum=fast
    )


def gemm_training(timer, out):
    one = torch.ones((), device="cuda")
    for model, layers in TRAINING_LAYERS.items():
        for name, n, k in layers:
            for tokens in TRAINING_TOKENS:
                # forward y = x W^T; dgrad dx = dy W; wgrad dW = dy^T x
                for pass_, (m, nn, kk) in {
                    "fwd": (tokens, n, k),
                    "dgrad": (tokens, k, n),
                    "wgrad": (n, k, tokens),
                }.items():
                    a = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
                    b = torch.randn(nn, kk, device="cuda", dtype=torch.bfloat16)
                    row = {
                        "group": "gemm_training",
                        "model": model,
                        "layer": name,
                        "pass": pass_,
                        "m": m,
                        "n": nn,
                        "k": kk,
                    }
                    emit(
                        out,
                        row | {"dtype": "bf16", "ms": timer.median_ms(partial(torch.mm, a, b.t()))},
                    )
                    a8, b8 = _fp8(a), _fp8(b)
                    for fast in (True, False):
                        try:
                            ms = timer.median_ms(partial(_scaled_mm, a8, b8, one, fast))
                        except Exception as e:  # noqa: BLE001 - record, go on
                            emit(
                                out,
                                row | {"dtype": "fp8", "fast_accum": fast, "error": str(e)[:200]},
                            )
                            continue
                        emit(out, row | {"dtype": "fp8", "fast_accum": fast, "ms": ms})
    # fp8 at serving shapes (weights streamed at one byte each)
    for name, n, k in SERVING_LAYERS["llama3-8b"]:
        b8 = _fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16))
        for m in [16, 32, 64, 128, 256, 512, 1024, 2048]:
            a8 = _fp8(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
            try:
                ms = timer.median_ms(partial(_scaled_mm, a8, b8, one, True))
                emit(
                    out,
                    {
                        "group": "gemm_serving",
                        "model": "llama3-8b",
                        "layer": name,
                        "m": m,
                        "n": n,
                        "k": k,
                        "dtype": "fp8",
                        "ms": ms,
                    },
                )
            except Exception as e:  # noqa: BLE001
                emit(
                    out,
                    {
                        "group": "gemm_serving",
                        "layer": name,
                        "m": m,
                        "dtype": "fp8",
                        "error": str(e)[:200],
                    },
                )


# MoE experts as (model, experts on this GPU, tokens routed to each, hidden, expert ffn)
MOE_LAYERS = [
    ("mixtral-8x7b", 8, 2048, 4096, 14336),
    ("qwen3-30b-a3b", 128, 512, 2048, 768),
    ("deepseek-v3-ep8", 32, 256, 7168, 2048),
]


def _expert_loop(x, w, tokens):
    return [torch.mm(x[i * tokens : (i + 1) * tokens], w[i].t()) for i in range(w.shape[0])]


def grouped_gemm(timer, out):
    for model, experts, tokens, hidden, ffn in MOE_LAYERS:
        offsets = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * tokens
        for layer, n, k in (("gate_up", 2 * ffn, hidden), ("down", hidden, ffn)):
            x = torch.randn(experts * tokens, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
            row = {
                "group": "grouped_gemm",
                "model": model,
                "layer": layer,
                "experts": experts,
                "tokens_per_expert": tokens,
                "n": n,
                "k": k,
                "dtype": "bf16",
            }
            dense = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            emit(
                out,
                row
                | {"how": "one_dense_mm", "ms": timer.median_ms(partial(torch.mm, x, dense.t()))},
            )
            emit(
                out,
                row | {"how": "loop", "ms": timer.median_ms(partial(_expert_loop, x, w, tokens))},
            )
            try:
                fn = partial(
                    torch._grouped_mm,
                    x,
                    w.transpose(-2, -1),
                    offs=offsets,
                    out_dtype=torch.bfloat16,
                )
                emit(out, row | {"how": "grouped_mm", "ms": timer.median_ms(fn)})
            except Exception as e:  # noqa: BLE001
                emit(out, row | {"how": "grouped_mm", "error": str(e)[:200]})


def _backends():
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }


def _backward(fwd, grad):
    fwd().backward(grad)


def attention_training(timer, out):
    from torch.nn.attention import sdpa_kernel

    heads, kv_heads, d = 32, 8, 128
    for seq in (2048, 4096, 8192):
        batch = 8192 // seq  # 8192 tokens a micro-batch, as the training rows
        q = torch.randn(
            batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True
        )
        kv = [
            torch.randn(
                batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True
            )
            for _ in range(2)
        ]
        kv_gqa = [
            torch.randn(
                batch, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True
            )
            for _ in range(2)
        ]
        grad = torch.randn_like(q)
        for backend, enum in _backends().items():
            for gqa in (False, True):
                k, v = kv_gqa if gqa else kv
                extra = {"enable_gqa": True} if gqa else {}
                row = {
                    "group": "attention_training",
                    "backend": backend,
                    "batch": batch,
                    "seq": seq,
                    "heads": heads,
                    "kv_heads": kv_heads if gqa else heads,
                    "head_dim": d,
                    "causal": True,
                }

                fwd = partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, **extra)
                try:
                    with sdpa_kernel([enum]):
                        f_ms = timer.median_ms(fwd)
                        fb_ms = timer.median_ms(partial(_backward, fwd, grad))
                except Exception as e:  # noqa: BLE001
                    emit(out, row | {"error": str(e)[:200]})
                    continue
                emit(out, row | {"fwd_ms": f_ms, "fwd_bwd_ms": fb_ms})
                q.grad = None
                for t in (*kv, *kv_gqa):
                    t.grad = None


def attention_decode(timer, out):
    from torch.nn.attention import sdpa_kernel

    heads, kv_heads, d = 32, 8, 128
    for batch in (1, 8, 32, 128):
        for cache in (512, 2048, 8192):
            q = torch.randn(batch, heads, 1, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, kv_heads, cache, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            for backend, enum in _backends().items():
                row = {
                    "group": "attention_decode",
                    "backend": backend,
                    "batch": batch,
                    "cache": cache,
                    "heads": heads,
                    "kv_heads": kv_heads,
                    "head_dim": d,
                }
                try:
                    with sdpa_kernel([enum]):
                        ms = timer.median_ms(
                            partial(F.scaled_dot_product_attention, q, k, v, enable_gqa=True)
                        )
                except Exception as e:  # noqa: BLE001
                    emit(out, row | {"error": str(e)[:200]})
                    continue
                emit(out, row | {"ms": ms})


def _silu_and_mul(gate_up, ffn):
    return F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:]


def elementwise(timer, out):
    for tokens, hidden, ffn in (
        (16, 4096, 14336),
        (256, 4096, 14336),
        (8192, 4096, 14336),
        (8192, 8192, 28672),
    ):
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
        gu = torch.randn(tokens, 2 * ffn, device="cuda", dtype=torch.bfloat16)
        cases = {
            "rms_norm": (partial(F.rms_norm, x, (hidden,), w), 2 * x.nbytes),
            "silu_and_mul": (partial(_silu_and_mul, gu, ffn), gu.nbytes * 3 // 2),
            "copy": (gu.clone, 2 * gu.nbytes),
        }
        for name, (fn, nbytes) in cases.items():
            ms = timer.median_ms(fn)
            emit(
                out,
                {
                    "group": "elementwise",
                    "op": name,
                    "tokens": tokens,
                    "hidden": hidden,
                    "ffn": ffn,
                    "min_bytes": nbytes,
                    "ms": ms,
                },
            )


def launch(timer, out):
    x = torch.randn(1024, device="cuda")
    count = 200

    def eager():
        for _ in range(count):
            x.add_(1.0)

    emit(out, {"group": "launch", "how": "eager", "kernels": count, "ms": timer.median_ms(eager)})
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        eager()
    emit(
        out,
        {"group": "launch", "how": "graph", "kernels": count, "ms": timer.median_ms(graph.replay)},
    )


GROUPS = {
    "gemm_serving": gemm_serving,
    "gemm_training": gemm_training,
    "grouped_gemm": grouped_gemm,
    "attention_training": attention_training,
    "attention_decode": attention_decode,
    "elementwise": elementwise,
    "launch": launch,
}


def main(path: str, only: list[str]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer()
    with open(path, "a") as out:
        emit(out, machine())
        for name, fn in GROUPS.items():
            if only and name not in only:
                continue
            t0 = time.perf_counter()
            try:
                fn(timer, out)
            except Exception as e:  # noqa: BLE001 - the other groups still run
                emit(out, {"group": name, "error": f"{type(e).__name__}: {e}"[:300]})
            torch.cuda.empty_cache()
            print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: kernels.py OUT.jsonl [GROUP ...]")
    if not torch.cuda.is_available():
        sys.exit("kernels.py times CUDA kernels: no CUDA device here")
    main(sys.argv[1], sys.argv[2:])
