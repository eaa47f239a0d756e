"""Which kernel runs a scaled-dot-product attention call on a device, why, and
how fast.

`choose_backend` follows PyTorch's SDPA dispatcher
(aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, `select_sdp_backend`;
sdp_utils_cpp.cpp for the CPU) as the run's PyTorch version orders it
(`spec.torch_version`, default the installed one): FlashAttention-2, then the
memory-efficient (xformers/cutlass) kernel, then the math decomposition. cuDNN's
fused attention goes first on sm90 and sm100 in 2.5.0 (made opt-in again in
2.5.1 after its bugs) and from 2.11 on (the bundled cuDNN passes the 9.15 gate
of `check_prefer_cudnn_attention`); elsewhere it runs only when asked. Each rule
below is one of the dispatcher's checks, with the reason it gives when it
fails. On a CPU, PyTorch has a flash kernel (no dropout) and the math path.

Three kernels outside PyTorch can be asked for: `flash3` (FlashAttention-3,
flash-attn's Hopper kernels: sm90 only), `flash1` (FlashAttention-1, the CUDA
kernels of flash-attn 1.x: what llm-foundry's `attn_impl: flash` and other
2022-23 trainers ran before FlashAttention-2) and `triton` (the Triton flash
kernel of flash-attn 1.x, `flash_attn_triton`, llm-foundry's `attn_impl: triton`).

Speed (`attention_efficiency`): a kernel's main loop runs its GEMMs at a fraction
of peak, and each score needs one exponential on the SMs' special-function
units (16 per clock per SM), which FlashAttention-2, the memory-efficient and
the Triton kernels run between their GEMMs while FlashAttention-3 and Hopper's
cuDNN kernels overlap them. The exponentials weigh more at small head sizes.
Each thread block also pays a prologue and epilogue about one K/V step long
(its Q tile in, its O tile out), and under a causal mask it computes the
diagonal tile whole: short sequences and causal masks run slower. The papers'
figures (long sequences, head size 128) anchor each kernel's main-loop rate.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..costs import AttentionShape, Cost, Gemm
from ..dtypes import bytes_per_element, runnable_dtype
from ..errors import DlperfError
from ..hardware.cpu import cpu_flash_useful_share
from ..hardware.spec import parse_torch_version

# The kernels `choose_backend` names: SDPA's own, and two from outside PyTorch.
BACKENDS = ("flash", "efficient", "cudnn", "math", "flash3", "flash1", "triton")
# What the reports call each (the user may say flash2 for flash).
KERNEL_NAMES = {
    "flash": "FlashAttention-2",
    "flash3": "FlashAttention-3",
    "flash1": "FlashAttention-1 (flash-attn 1.x)",
    "efficient": "memory-efficient (cutlass)",
    "cudnn": "cuDNN fused attention",
    "triton": "Triton flash kernel",
    "math": "math (GEMMs and softmax)",
}
ALIASES = {"flash2": "flash"}
_HALF = ("fp16", "bf16")
# Compute capability of a spec without one, by architecture family.
_FAMILY_SM = {
    "maxwell": (5, 2),
    "pascal": (6, 0),
    "volta": (7, 0),
    "turing": (7, 5),
    "ampere": (8, 0),
    "ada": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
}
# The range of SM versions the CUDA kernels are built for (check_*_hardware_support).
_FLASH_SM = ((8, 0), (12, 1))
_EFFICIENT_SM = ((5, 0), (12, 1))
_CUDNN_SM = ((8, 0), (12, 1))
_TRITON_SM = ((8, 0), (12, 1))
# flash-attn 1.x builds its kernels for Turing (sm75, fp16 only), Ampere and Hopper.
_FLASH1_SM = ((7, 5), (9, 0))
FLASH1_MAX_HEAD_DIM = 128
FLASH_MAX_HEAD_DIM = 256
TRITON_MAX_HEAD_DIM = 128  # flash_attn_triton's head sizes


def compute_capability(spec) -> tuple[int, int]:
    """(major, minor) of a GPU spec: its `compute_capability`, else its family's."""
    text = getattr(spec, "compute_capability", "")
    if text:
        major, _, minor = text.partition(".")
        return int(major), int(minor or 0)
    return _FAMILY_SM.get(spec.architecture, (0, 0))


def _sm(cc: tuple[int, int]) -> str:
    return f"sm{cc[0]}{cc[1]}"


def _in(cc, bounds) -> bool:
    return bounds[0] <= cc <= bounds[1]


def _flash_refusal(cc, s: AttentionShape) -> str:
    """Why FlashAttention-2 cannot run the call on a device of capability `cc` ('' if it can)."""
    if s.mask:
        return "flash takes no attention mask and the model passes one"
    if not (s.head_dim == s.value_dim and s.head_dim <= FLASH_MAX_HEAD_DIM):
        return f"flash needs equal q, k, v head sizes <= {FLASH_MAX_HEAD_DIM}"
    if not _in(cc, _FLASH_SM):
        return f"flash needs an sm80+ GPU and this one is {_sm(cc)}"
    # the consumer parts' smaller shared memory: no backward for these head sizes
    consumer = _in(cc, ((8, 6), (8, 9))) or _in(cc, ((12, 0), (12, 1)))
    big = 192 < s.head_dim <= 224 or (s.head_dim > 224 and s.dropout > 0)
    if consumer and s.needs_grad and big:
        return f"flash has no backward for head size {s.head_dim} on {_sm(cc)}"
    if s.causal and s.q_len != s.kv_len:
        return "flash takes is_causal only with equal query and key lengths"
    if s.dtype not in _HALF:
        return f"flash needs fp16/bf16 and the inputs are {s.dtype}"
    return ""


def _efficient_alignment(cc, dtype: str) -> int:
    """Head sizes the cutlass kernels load in whole vectors of (minimum_gemm_alignment)."""
    half = dtype in _HALF
    tensor_cores = cc >= (8, 0) or (cc >= (7, 0) and half)
    alignment = 4 if cc >= (8, 0) else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def _efficient_refusal(cc, s: AttentionShape) -> str:
    if not _in(cc, _EFFICIENT_SM):
        return f"memory-efficient attention needs an sm50+ GPU and this one is {_sm(cc)}"
    align = _efficient_alignment(cc, s.dtype)
    if s.head_dim % align or s.value_dim % align:
        return f"memory-efficient attention needs head sizes that are multiples of {align}"
    allowed = ("fp16", "bf16", "fp32") if cc >= (8, 0) else ("fp16", "fp32")
    if s.dtype not in allowed:
        return f"memory-efficient attention on {_sm(cc)} needs {'/'.join(allowed)}"
    return ""


def _cudnn_refusal(cc, s: AttentionShape) -> str:
    if not _in(cc, _CUDNN_SM):
        return f"cuDNN attention needs an sm80+ GPU and this one is {_sm(cc)}"
    if s.dtype not in _HALF:
        return f"cuDNN attention needs fp16/bf16 and the inputs are {s.dtype}"
    limit = 256 if cc[0] in (9, 10) else 128
    if max(s.head_dim, s.value_dim) > limit or s.head_dim % 8 or s.value_dim % 8:
        return f"cuDNN attention needs head sizes that are multiples of 8, <= {limit}"
    if s.dropout * 16 != int(s.dropout * 16):
        return "cuDNN attention takes dropout in steps of 1/16"
    return ""


def _flash3_refusal(cc, s: AttentionShape) -> str:
    if cc[0] != 9:
        return f"FlashAttention-3 runs on Hopper (sm90) only and this GPU is {_sm(cc)}"
    if s.dtype not in (*_HALF, "fp8"):
        return f"FlashAttention-3 needs fp16/bf16/fp8 and the inputs are {s.dtype}"
    if s.mask:
        return "FlashAttention-3 takes no attention mask and the model passes one"
    if max(s.head_dim, s.value_dim) > FLASH_MAX_HEAD_DIM or s.head_dim % 8:
        return f"FlashAttention-3 needs head sizes that are multiples of 8, <= {FLASH_MAX_HEAD_DIM}"
    return ""


def _flash1_refusal(cc, s: AttentionShape) -> str:
    if not _in(cc, _FLASH1_SM):
        return f"FlashAttention-1 runs on sm75 to sm90 and this GPU is {_sm(cc)}"
    if s.dtype not in _HALF or (s.dtype == "bf16" and cc < (8, 0)):
        return f"FlashAttention-1 needs fp16 (or bf16 on sm80+) and the inputs are {s.dtype}"
    if s.mask:
        return "FlashAttention-1 takes no attention mask (a causal one only)"
    if s.head_dim != s.value_dim or s.head_dim > FLASH1_MAX_HEAD_DIM or s.head_dim % 8:
        return (
            "FlashAttention-1 needs equal head sizes that are multiples of 8, "
            f"<= {FLASH1_MAX_HEAD_DIM}"
        )
    if s.kv_heads != s.heads:
        return "FlashAttention-1 has no grouped-query attention (as many k/v heads as q heads)"
    backward = s.needs_grad or s.phase == "backward"
    if backward and s.head_dim > 64 and cc not in ((8, 0), (9, 0)):
        return f"FlashAttention-1's backward above head size 64 needs sm80 or sm90, not {_sm(cc)}"
    return ""


def _triton_refusal(cc, s: AttentionShape) -> str:
    if not _in(cc, _TRITON_SM):
        return f"the Triton flash kernel needs an sm80+ GPU and this one is {_sm(cc)}"
    if s.dtype not in _HALF:
        return f"the Triton flash kernel needs fp16/bf16 and the inputs are {s.dtype}"
    if s.head_dim != s.value_dim or s.head_dim > TRITON_MAX_HEAD_DIM:
        return f"the Triton flash kernel needs equal head sizes <= {TRITON_MAX_HEAD_DIM}"
    if s.dropout > 0:
        return "the Triton flash kernel takes no dropout"
    return ""


_GPU_RULES = {
    "flash": _flash_refusal,
    "efficient": _efficient_refusal,
    "cudnn": _cudnn_refusal,
    "flash3": _flash3_refusal,
    "flash1": _flash1_refusal,
    "triton": _triton_refusal,
}
_AUTO_ORDER = ("flash", "efficient")
# cuDNN first on Hopper and Blackwell (its kernels use their asynchronous Tensor
# Core instructions, as FlashAttention-3 does; PyTorch's flash kernel is FA2).
_AUTO_ORDER_CUDNN_FIRST = ("cudnn", "flash", "efficient")


def torch_version(spec) -> tuple[int, ...]:
    """The PyTorch version whose dispatcher runs: the spec's, else the installed one.
    "2.5" means the 2.5 line's last release (2.5.1); "2.5.0" its first."""
    import torch

    text = getattr(spec, "torch_version", "") or torch.__version__
    return parse_torch_version(text) or (0, 0)


def cudnn_first(cc, version: tuple[int, ...]) -> bool:
    """Whether SDPA tries cuDNN first: sm90/sm100 under PyTorch 2.5.0, or 2.11 and later."""
    return cc[0] in (9, 10) and (version[:3] == (2, 5, 0) or version[:2] >= (2, 11))


def _cpu_flash_refusal(s: AttentionShape) -> str:
    if s.dropout > 0:
        return "PyTorch's CPU flash kernel takes no dropout"
    if s.head_dim != s.value_dim:
        return "PyTorch's CPU flash kernel needs equal q, k, v head sizes"
    return ""


def choose_backend(spec, shape: AttentionShape, requested: str = "auto") -> tuple[str, str]:
    """(backend, why): the kernel PyTorch's SDPA runs `shape` with on `spec`.

    `requested` is "auto" (the dispatcher's own choice) or one backend; one
    the device or the inputs cannot run is refused with a DlperfError. An
    aten op of a real run (`shape.named`) is priced as its own kernel where
    the device runs it."""
    requested = ALIASES.get(requested, requested)
    if requested != "auto" and requested not in _GPU_RULES:
        choices = ", ".join(("auto", *_GPU_RULES))
        raise DlperfError(f"unknown attention backend {requested!r}; choose from: {choices}")
    if spec.kind == "cpu":
        return _choose_on_cpu(shape, requested)
    cc = compute_capability(spec)
    if shape.named and not _GPU_RULES[shape.named](cc, shape):
        return shape.named, "the kernel the trace ran"
    if requested == "auto":
        return _dispatch(cc, shape, torch_version(spec))
    refusal = _GPU_RULES[requested](cc, shape)
    if not refusal and spec.efficiency.attention_efficiency(requested, shape.phase) <= 0:
        refusal = f"its spec gives {requested} no efficiency (attention_{requested}_* is 0)"
    if refusal:
        instead = _dispatch(cc, shape, torch_version(spec))[0]
        raise DlperfError(
            f"--attention {requested} cannot run on the {spec.id}: {refusal}; use {instead} or auto"
        )
    return requested, "as requested"


def _dispatch(cc, s: AttentionShape, version: tuple[int, ...]) -> tuple[str, str]:
    """The dispatcher's own order under PyTorch `version`: the first backend
    that can run, and why."""
    refusals = []
    first = cudnn_first(cc, version)
    for backend in _AUTO_ORDER_CUDNN_FIRST if first else _AUTO_ORDER:
        refusal = _GPU_RULES[backend](cc, s)
        if not refusal:
            mask = f"{s.mask} mask" if s.mask else "no mask"
            torch_text = "torch " + ".".join(map(str, version[:2]))
            fits = f"{_sm(cc)}, {torch_text}, {s.dtype}, head size {s.head_dim}, {mask}"
            return backend, "; ".join(refusals) or fits
        refusals.append(refusal)
    return "math", "; ".join(refusals)


def _choose_on_cpu(shape: AttentionShape, requested: str) -> tuple[str, str]:
    refusal = _cpu_flash_refusal(shape)
    if requested in ("efficient", "cudnn", "flash3", "flash1", "triton"):
        raise DlperfError(
            f"--attention {requested} is a CUDA kernel; the CPU runs flash or math: use auto"
        )
    if requested == "flash" and refusal:
        raise DlperfError(f"--attention flash cannot run here: {refusal}; use auto")
    if shape.named == "flash" or not refusal:
        return "flash", "PyTorch's CPU flash kernel"
    return "math", refusal


# -- what the chosen kernel costs on the device ---------------------------------

# FlashAttention-2's forward gives each thread block 128 query rows (its backward
# 128 key rows): kBlockM / kBlockN of flash_fwd/bwd_launch_template.h for the
# common head sizes. A block holds most of an SM's shared memory: one per SM.
BLOCK_ROWS = 128


class FusedTerms(NamedTuple):
    """The terms of one fused attention kernel on a device."""

    math_s: float
    memory_s: float
    latency_s: float
    blocks: int
    waves: int
    wave_efficiency: float


# Kernels that overlap the exponentials with their GEMMs (warp-specialized
# ping-pong on Hopper's asynchronous Tensor Cores); the others run them in turn.
_OVERLAPPED = ("flash3",)
_OVERLAPPED_ON_SM90 = ("cudnn",)
# The papers' figures, which anchor each kernel's main loop, are at this head size.
ANCHOR_HEAD_DIM = 128


def _overlaps_softmax(spec, backend: str) -> bool:
    return backend in _OVERLAPPED or (
        backend in _OVERLAPPED_ON_SM90 and compute_capability(spec)[0] >= 9
    )


def _exp_share(spec, shape: AttentionShape, head_dim: int, peak: float) -> float:
    """Time of a score's exponential over the time of its GEMM FLOPs at peak."""
    eff = spec.efficiency
    clock = spec.clock_hz(False) * spec.sustained_clock_fraction(False)
    exp_rate = eff.special_function_ops_per_clock_per_sm * spec.sm_count * clock
    per_score = 2.0 * (head_dim + head_dim) if shape.phase == "forward" else 2.0 * 5 * head_dim
    return (1.0 / exp_rate) / (per_score / peak)


def attention_efficiency(spec, shape: AttentionShape, backend: str, peak: float) -> float:
    """Fraction of `peak` a fused kernel reaches on `shape`: its main loop (anchored
    on the paper's figure at head size 128 and long sequences), its exponentials
    (serial or overlapped), and its per-block prologue and causal diagonal."""
    anchor = spec.efficiency.attention_efficiency(backend, shape.phase)
    if anchor <= 0:
        return 0.0
    if spec.kind == "cpu":  # the probe's measured rate, in the CPU kernel's own blocks
        return anchor * cpu_flash_useful_share(shape)
    head_dim = (shape.head_dim + shape.value_dim) // 2
    at_anchor = _exp_share(spec, shape, ANCHOR_HEAD_DIM, peak)
    here = _exp_share(spec, shape, head_dim, peak)
    if _overlaps_softmax(spec, backend):
        main_loop = anchor
        loop = 1.0 / max(1.0 / main_loop, here)
    else:
        main_loop = 1.0 / max(1.0, 1.0 / anchor - at_anchor)  # 1/anchor = 1/main + exp share
        loop = 1.0 / (1.0 / main_loop + here)
    steps = math.ceil((shape.kv_len if shape.phase == "forward" else shape.q_len) / BLOCK_ROWS)
    # one prologue + epilogue per block, about one K/V step; a causal block computes
    # (n + 1) / 2 steps on average of which n / 2 are useful
    blocks = steps / (steps + 3) if shape.causal else steps / (steps + 1)
    return loop * blocks


def fused_terms(spec, shape: AttentionShape, backend: str) -> FusedTerms:
    """Math at peak(dtype) x the kernel's efficiency on this shape x wave
    efficiency; memory at the attainable bandwidth; one launch."""
    dtype = runnable_dtype(shape.math_dtype, spec)
    unit = spec.unit(dtype)
    eff = spec.efficiency
    peak = unit.peak_flops_per_s * spec.sustained_clock_fraction(unit.tensor_cores)
    rate = peak * attention_efficiency(spec, shape, backend, peak)
    rows = shape.q_len if shape.phase == "forward" else shape.kv_len
    blocks = shape.batch * shape.heads * math.ceil(rows / BLOCK_ROWS)
    waves = math.ceil(blocks / spec.sm_count)
    wave_efficiency = blocks / (waves * spec.sm_count)
    return FusedTerms(
        math_s=shape.flops / (rate * wave_efficiency),
        memory_s=shape.bytes / (spec.memory_bandwidth_bytes_per_s * eff.dram_efficiency),
        latency_s=eff.kernel_latency_s,
        blocks=blocks,
        waves=waves,
        wave_efficiency=wave_efficiency,
    )


# Passes over the L x S matrix the math path makes outside its GEMMs, in elements
# read + written: the mask added (2), softmax (2), dropout (2, and its 1-byte mask)
# forward; dropout backward (2 + mask), softmax backward (grad and probabilities in,
# grad out: 3).
_MASK_PASSES, _SOFTMAX_PASSES = 2, 2
_DROPOUT_PASSES, _SOFTMAX_BACKWARD_PASSES = 2, 3


def math_cost(spec, shape: AttentionShape) -> Cost:
    """The math decomposition as GEMMs plus the L x S traffic around them
    (the CPU kernel upcasts half precision to fp32; CUDA's runs in the dtype)."""
    dtype, storage = shape.math_dtype, shape.dtype
    if spec.kind == "cpu" and storage in _HALF:
        dtype = storage = "fp32"
    b, lq, lk = shape.batch * shape.heads, shape.q_len, shape.kv_len
    d, dv = shape.head_dim, shape.value_dim
    if shape.phase == "forward":
        sizes = ((lq, lk, d, "scores"), (lq, dv, lk, "context"))
        masked = bool(shape.mask or shape.causal)
        passes = _SOFTMAX_PASSES + _MASK_PASSES * masked
        kernels = len(sizes) + 1 + masked
    else:
        sizes = ((lq, lk, dv, "grad probabilities"), (lk, dv, lq, "grad v"),
                 (lq, d, lk, "grad q"), (lk, d, lq, "grad k"))  # fmt: skip
        passes = _SOFTMAX_BACKWARD_PASSES
        kernels = len(sizes) + 1
    elements = b * lq * lk
    scores_bytes = passes * elements * bytes_per_element(storage)
    if shape.dropout:
        scores_bytes += elements * (_DROPOUT_PASSES * bytes_per_element(storage) + 1)
        kernels += 1
    gemms = tuple(Gemm(m, n, k, b, dtype=dtype, storage=storage, role=r) for m, n, k, r in sizes)
    return Cost(
        flops=sum(g.flops for g in gemms),
        bytes_read=shape.bytes + scores_bytes,
        gemms=gemms,
        side_bytes=scores_bytes,
        kernels=kernels,
    )
