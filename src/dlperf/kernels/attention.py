"""Which kernel runs a scaled-dot-product attention call on a device, why, and
how fast.

`choose_backend` follows PyTorch's SDPA dispatcher
(aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, `select_sdp_backend`;
sdp_utils_cpp.cpp for the CPU) as the run's PyTorch version orders it
(`spec.torch_version`, default the installed one): FlashAttention-2 (FlashAttention-1
in 2.0 and 2.1: PyTorch moved its flash kernel to FA2 in 2.2), then the
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
from .attention_backends import BY_NAME, FUSED, HALF, REGISTRY, sm_name

# The run configuration's --attention choices and aliases come from the registry too.
from .attention_backends import ALIASES, ATTENTION_CHOICES  # noqa: F401  # isort: skip

# The kernels `choose_backend` names, and what the reports call each.
BACKENDS = tuple(b.name for b in REGISTRY)
KERNEL_NAMES = {b.name: b.kernel for b in REGISTRY}
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


def compute_capability(spec) -> tuple[int, int]:
    """(major, minor) of a GPU spec: its `compute_capability`, else its family's."""
    text = getattr(spec, "compute_capability", "")
    if text:
        major, _, minor = text.partition(".")
        return int(major), int(minor or 0)
    return _FAMILY_SM.get(spec.architecture, (0, 0))


def architecture_of(major: int, minor: int = 0) -> str | None:
    """The architecture family of compute capability major.minor: the newest
    family whose own (`_FAMILY_SM`) is not above it (8.6 and 8.7 are Ampere,
    7.2 Volta, 10.x and 12.x Blackwell); None below Maxwell's 5.2."""
    found = None
    for family, sm in sorted(_FAMILY_SM.items(), key=lambda item: item[1]):
        if sm <= (major, minor):
            found = family
    return found


_AUTO_ORDER = ("flash", "efficient")
# PyTorch 2.0 and 2.1 built their flash kernel from FlashAttention-1; 2.2 moved it to FA2.
_AUTO_ORDER_FA1 = ("flash1", "efficient")
# cuDNN first on Hopper and Blackwell (its kernels use their asynchronous Tensor
# Core instructions, as FlashAttention-3 does; PyTorch's flash kernel is FA2).
_AUTO_ORDER_CUDNN_FIRST = ("cudnn", "flash", "efficient")


def torch_version(spec) -> tuple[int, ...]:
    """The PyTorch version whose dispatcher runs: the spec's, else the installed one.
    "2.5" means the 2.5 line's last release (2.5.1); "2.5.0" its first."""
    import torch

    text = getattr(spec, "torch_version", "") or torch.__version__
    return parse_torch_version(text) or (0, 0)


def flash_is_fa1(version: tuple[int, ...]) -> bool:
    """Whether PyTorch's flash kernel is FlashAttention-1 (2.0 and 2.1)."""
    return (2, 0) <= version[:2] < (2, 2)


def cudnn_first(cc, version: tuple[int, ...]) -> bool:
    """Whether SDPA tries cuDNN first: sm90/sm100 under PyTorch 2.5.0, or 2.11 and later."""
    return cc[0] in (9, 10) and (version[:3] == (2, 5, 0) or version[:2] >= (2, 11))


def choose_backend(spec, shape: AttentionShape, requested: str = "auto") -> tuple[str, str]:
    """(backend, why): the kernel PyTorch's SDPA runs `shape` with on `spec`.

    `requested` is "auto" (the dispatcher's own choice) or one backend; one
    the device or the inputs cannot run is refused with a DlperfError. An
    aten op of a real run (`shape.named`) is priced as its own kernel where
    the device runs it."""
    requested = ALIASES.get(requested, requested)
    if requested != "auto" and requested not in FUSED:
        choices = ", ".join(("auto", *FUSED))
        raise DlperfError(f"unknown attention backend {requested!r}; choose from: {choices}")
    if spec.kind == "cpu":
        return _choose_on_cpu(shape, requested)
    cc = compute_capability(spec)
    if shape.named and not BY_NAME[shape.named].why_not(cc, shape):
        return shape.named, "the kernel the trace ran"
    if requested == "auto":
        return _dispatch(cc, shape, torch_version(spec))
    if requested == "flash" and flash_is_fa1(torch_version(spec)):
        requested = "flash1"  # the flash kernel of that PyTorch
    kernel = BY_NAME[requested]
    refusal = kernel.why_not(cc, shape)
    if not refusal and kernel.anchor(spec.efficiency, shape.phase) <= 0:
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
    order = _AUTO_ORDER_CUDNN_FIRST if first else _AUTO_ORDER
    if flash_is_fa1(version):
        order = _AUTO_ORDER_FA1
    for backend in order:
        refusal = BY_NAME[backend].why_not(cc, s)
        if not refusal:
            mask = f"{s.mask} mask" if s.mask else "no mask"
            torch_text = "torch " + ".".join(map(str, version[:2]))
            fits = f"{sm_name(cc)}, {torch_text}, {s.dtype}, head size {s.head_dim}, {mask}"
            return backend, "; ".join(refusals) or fits
        refusals.append(refusal)
    return "math", "; ".join(refusals)


def _choose_on_cpu(shape: AttentionShape, requested: str) -> tuple[str, str]:
    refusal = BY_NAME["flash"].cpu_refusal(shape)
    if requested != "auto" and BY_NAME[requested].cpu_refusal is None:
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


# The papers' figures, which anchor each kernel's main loop, are at this head size.
ANCHOR_HEAD_DIM = 128


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
    kernel = BY_NAME[backend]
    anchor = kernel.anchor(spec.efficiency, shape.phase)
    if anchor <= 0:
        return 0.0
    if spec.kind == "cpu":  # the probe's measured rate, in the CPU kernel's own blocks
        return anchor * cpu_flash_useful_share(shape)
    head_dim = (shape.head_dim + shape.value_dim) // 2
    at_anchor = _exp_share(spec, shape, ANCHOR_HEAD_DIM, peak)
    here = _exp_share(spec, shape, head_dim, peak)
    if kernel.overlaps_softmax(compute_capability(spec)):
        main_loop = anchor
        loop = 1.0 / max(1.0 / main_loop, here)
    else:
        main_loop = 1.0 / max(1.0, 1.0 / anchor - at_anchor)  # 1/anchor = 1/main + exp share
        loop = 1.0 / (1.0 / main_loop + here)
    forward = shape.phase == "forward"
    steps = math.ceil((shape.kv_len if forward else shape.q_len) / BLOCK_ROWS)
    # one prologue + epilogue per block, about one K/V step forward (the backward's
    # own count: `attention_backward_overhead_steps`); a causal block computes
    # (n + 1) / 2 steps on average of which n / 2 are useful
    overhead = 1.0 if forward else spec.efficiency.attention_backward_overhead_steps
    return loop * steps / (steps + overhead + 2 * bool(shape.causal))


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
        memory_s=shape.bytes / (spec.sustained_bandwidth_bytes_per_s() * eff.dram_efficiency),
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
    if spec.kind == "cpu" and storage in HALF:
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
