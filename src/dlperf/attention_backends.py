"""Which kernel runs a scaled-dot-product attention call on a device, and why.

`choose_backend` follows PyTorch's SDPA dispatcher
(aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, `select_sdp_backend`;
sdp_utils_cpp.cpp for the CPU): on CUDA it tries FlashAttention-2, then the
memory-efficient (xformers/cutlass) kernel, then the math decomposition, and
runs cuDNN's fused attention only when asked. Each rule below is one of the
dispatcher's checks, with the reason it gives when it fails. On a CPU,
PyTorch has a flash kernel (no dropout) and the math path.

Recent PyTorch builds (cuDNN newer than 9.15) put cuDNN first on sm90 and
sm100; dlperf keeps flash first there too, as the dispatcher long did.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .dtypes import bytes_per_element, runnable_dtype
from .errors import DlperfError
from .ops.cost import AttentionShape, Cost, Gemm

# The kernels SDPA may run (`choose_backend` names one of them).
BACKENDS = ("flash", "efficient", "cudnn", "math")
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
FLASH_MAX_HEAD_DIM = 256


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


_GPU_RULES = {"flash": _flash_refusal, "efficient": _efficient_refusal, "cudnn": _cudnn_refusal}
_AUTO_ORDER = ("flash", "efficient")
# On Hopper and Blackwell recent PyTorch tries cuDNN's attention first (its
# kernels use those GPUs' asynchronous Tensor Core instructions, as
# FlashAttention-3 does; PyTorch's own flash kernel is FlashAttention-2).
_AUTO_ORDER_SM90 = ("cudnn", "flash", "efficient")


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
    if requested != "auto" and requested not in _GPU_RULES:
        choices = ", ".join(("auto", *_GPU_RULES))
        raise DlperfError(f"unknown attention backend {requested!r}; choose from: {choices}")
    if spec.kind == "cpu":
        return _choose_on_cpu(shape, requested)
    cc = compute_capability(spec)
    if shape.named and not _GPU_RULES[shape.named](cc, shape):
        return shape.named, "the kernel the trace ran"
    if requested == "auto":
        return _dispatch(cc, shape)
    refusal = _GPU_RULES[requested](cc, shape)
    if refusal:
        instead = _dispatch(cc, shape)[0]
        raise DlperfError(
            f"--attention {requested} cannot run on the {spec.id}: {refusal}; use {instead} or auto"
        )
    return requested, "as requested"


def _dispatch(cc, s: AttentionShape) -> tuple[str, str]:
    """The dispatcher's own order: the first backend that can run, and why."""
    refusals = []
    for backend in _AUTO_ORDER_SM90 if cc[0] in (9, 10) else _AUTO_ORDER:
        refusal = _GPU_RULES[backend](cc, s)
        if not refusal:
            mask = f"{s.mask} mask" if s.mask else "no mask"
            fits = f"{_sm(cc)}, {s.dtype}, head size {s.head_dim}, {mask}"
            return backend, "; ".join(refusals) or fits
        refusals.append(refusal)
    return "math", "; ".join(refusals)


def _choose_on_cpu(shape: AttentionShape, requested: str) -> tuple[str, str]:
    refusal = _cpu_flash_refusal(shape)
    if requested in ("efficient", "cudnn"):
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


def fused_terms(spec, shape: AttentionShape, backend: str) -> FusedTerms:
    """Math at peak(dtype) x the backend's efficiency x wave efficiency; memory
    at the attainable bandwidth; one launch."""
    dtype = runnable_dtype(shape.math_dtype, spec)
    unit = spec.unit(dtype)
    eff = spec.efficiency
    rate = unit.peak_flops_per_s * spec.sustained_clock_fraction(unit.tensor_cores)
    rate *= eff.attention_efficiency(backend, shape.phase)
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
