"""The attention kernels dlperf knows, one entry each: the one table that the
--attention choices, the tracer, the Hugging Face loader and `kernels.attention`
read their names from, so that a new kernel is one `Backend` here (and its
efficiencies, per architecture family, in `hardware/specs/_architectures.toml`).

Each entry says where its kernel runs (the SM versions it is built for, and
the dispatcher's or library's checks on the inputs, as `refusal`: the reason
it gives when a check fails, '' when it runs) and how it is priced: a fused
kernel at the fraction of peak its spec's `Efficiency.attention[name]` gives,
the math path as its GEMMs and passes (`kernels.attention.math_cost`).

This module imports nothing of dlperf's, so that the tracer and the model
loaders can read it without the kernel model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..hardware.spec import Efficiency
    from ..ops.cost import AttentionShape

CC = tuple[int, int]
Refusal = Callable[[CC, "AttentionShape"], str]

HALF = ("fp16", "bf16")
FLASH1_MAX_HEAD_DIM = 128
FLASH_MAX_HEAD_DIM = 256
TRITON_MAX_HEAD_DIM = 128  # flash_attn_triton's head sizes


@dataclass(frozen=True)
class Backend:
    """One attention kernel: its names, where it runs, and how it is priced."""

    name: str  # what --attention, the reports and the spec's efficiencies call it
    kernel: str  # what the reports spell out
    aliases: tuple[str, ...] = ()  # other names the user may give it
    # (lowest, highest) compute capability its CUDA kernels are built for; None: no
    # fused kernel (the math path runs anywhere, as GEMMs and passes)
    sm: tuple[CC, CC] | None = None
    # why it refuses a GPU outside that range ({sm}: the GPU's)
    sm_refusal: str = ""
    # whether that is its first check (FlashAttention-2's comes after the mask and
    # head sizes, as sdp_utils.cpp orders them: its `refusal` makes it)
    sm_first: bool = True
    # why it cannot run a call on a GPU of a capability ('' if it can), the SM range
    # already checked; None: no checks (the math path)
    refusal: Refusal | None = None
    # the same on a CPU; None: a CUDA kernel only
    cpu_refusal: Callable[[AttentionShape], str] | None = None
    # whether an aten op of a real run names it (`_scaled_dot_product_<name>_attention`)
    aten: bool = False
    # the capability from which it overlaps its exponentials with its GEMMs
    # (warp-specialized ping-pong on Hopper's asynchronous Tensor Cores); None: never
    overlaps_softmax_from: CC | None = None

    @property
    def fused(self) -> bool:
        """One kernel priced at a fraction of peak (else the math decomposition)."""
        return self.sm is not None

    def why_not(self, cc: CC, shape: AttentionShape) -> str:
        """Why it cannot run `shape` on a GPU of capability `cc` ('' if it can)."""
        if self.sm_first and not self.runs_on(cc):
            return self.sm_refusal.format(sm=sm_name(cc))
        return self.refusal(cc, shape) if self.refusal else ""

    def runs_on(self, cc: CC) -> bool:
        """Whether its kernels are built for capability `cc` (the math path: always)."""
        return self.sm is None or self.sm[0] <= cc <= self.sm[1]

    def anchor(self, efficiency: Efficiency, phase: str) -> float:
        """The paper's fraction of peak of its main loop in `phase` at head size 128
        and long sequences (0: none published for the device's family)."""
        rates = efficiency.attention.get(self.name)
        return rates.of(phase) if rates else 0.0

    def overlaps_softmax(self, cc: CC) -> bool:
        return self.overlaps_softmax_from is not None and cc >= self.overlaps_softmax_from


def sm_name(cc: CC) -> str:
    return f"sm{cc[0]}{cc[1]}"


def _in(cc: CC, bounds: tuple[CC, CC]) -> bool:
    return bounds[0] <= cc <= bounds[1]


# -- each kernel's checks, as PyTorch's dispatcher (sdp_utils.cpp) or the
#    kernel's library makes them, in their order --------------------------------


def _flash_refusal(cc: CC, s: AttentionShape) -> str:
    if s.mask:
        return "flash takes no attention mask and the model passes one"
    if not (s.head_dim == s.value_dim and s.head_dim <= FLASH_MAX_HEAD_DIM):
        return f"flash needs equal q, k, v head sizes <= {FLASH_MAX_HEAD_DIM}"
    if not BY_NAME["flash"].runs_on(cc):
        return BY_NAME["flash"].sm_refusal.format(sm=sm_name(cc))
    # the consumer parts' smaller shared memory: no backward for these head sizes
    consumer = _in(cc, ((8, 6), (8, 9))) or _in(cc, ((12, 0), (12, 1)))
    big = 192 < s.head_dim <= 224 or (s.head_dim > 224 and s.dropout > 0)
    if consumer and s.needs_grad and big:
        return f"flash has no backward for head size {s.head_dim} on {sm_name(cc)}"
    if s.causal and s.q_len != s.kv_len:
        return "flash takes is_causal only with equal query and key lengths"
    if s.dtype not in HALF:
        return f"flash needs fp16/bf16 and the inputs are {s.dtype}"
    return ""


def _cpu_flash_refusal(s: AttentionShape) -> str:
    if s.dropout > 0:
        return "PyTorch's CPU flash kernel takes no dropout"
    if s.head_dim != s.value_dim:
        return "PyTorch's CPU flash kernel needs equal q, k, v head sizes"
    return ""


def _efficient_alignment(cc: CC, dtype: str) -> int:
    """Head sizes the cutlass kernels load in whole vectors of (minimum_gemm_alignment)."""
    half = dtype in HALF
    tensor_cores = cc >= (8, 0) or (cc >= (7, 0) and half)
    alignment = 4 if cc >= (8, 0) else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def _efficient_refusal(cc: CC, s: AttentionShape) -> str:
    align = _efficient_alignment(cc, s.dtype)
    if s.head_dim % align or s.value_dim % align:
        return f"memory-efficient attention needs head sizes that are multiples of {align}"
    allowed = ("fp16", "bf16", "fp32") if cc >= (8, 0) else ("fp16", "fp32")
    if s.dtype not in allowed:
        return f"memory-efficient attention on {sm_name(cc)} needs {'/'.join(allowed)}"
    return ""


def _cudnn_refusal(cc: CC, s: AttentionShape) -> str:
    if s.dtype not in HALF:
        return f"cuDNN attention needs fp16/bf16 and the inputs are {s.dtype}"
    limit = 256 if cc[0] in (9, 10) else 128
    if max(s.head_dim, s.value_dim) > limit or s.head_dim % 8 or s.value_dim % 8:
        return f"cuDNN attention needs head sizes that are multiples of 8, <= {limit}"
    if s.dropout * 16 != int(s.dropout * 16):
        return "cuDNN attention takes dropout in steps of 1/16"
    return ""


def _flash3_refusal(cc: CC, s: AttentionShape) -> str:
    if s.dtype not in (*HALF, "fp8"):
        return f"FlashAttention-3 needs fp16/bf16/fp8 and the inputs are {s.dtype}"
    if s.mask:
        return "FlashAttention-3 takes no attention mask and the model passes one"
    if max(s.head_dim, s.value_dim) > FLASH_MAX_HEAD_DIM or s.head_dim % 8:
        return f"FlashAttention-3 needs head sizes that are multiples of 8, <= {FLASH_MAX_HEAD_DIM}"
    return ""


def _flash1_refusal(cc: CC, s: AttentionShape) -> str:
    if s.dtype not in HALF or (s.dtype == "bf16" and cc < (8, 0)):
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
        sm = sm_name(cc)
        return f"FlashAttention-1's backward above head size 64 needs sm80 or sm90, not {sm}"
    return ""


def _triton_refusal(cc: CC, s: AttentionShape) -> str:
    if s.dtype not in HALF:
        return f"the Triton flash kernel needs fp16/bf16 and the inputs are {s.dtype}"
    if s.head_dim != s.value_dim or s.head_dim > TRITON_MAX_HEAD_DIM:
        return f"the Triton flash kernel needs equal head sizes <= {TRITON_MAX_HEAD_DIM}"
    if s.dropout > 0:
        return "the Triton flash kernel takes no dropout"
    return ""


REGISTRY: tuple[Backend, ...] = (
    Backend("flash", "FlashAttention-2", aliases=("flash2",), sm=((8, 0), (12, 1)),
            sm_refusal="flash needs an sm80+ GPU and this one is {sm}", sm_first=False,
            refusal=_flash_refusal, cpu_refusal=_cpu_flash_refusal, aten=True),
    # `flash3` (flash-attn's Hopper kernels), `flash1` (the CUDA kernels of flash-attn
    # 1.x: llm-foundry's `attn_impl: flash` and other 2022-23 trainers) and `triton`
    # (flash-attn 1.x's `flash_attn_triton`, llm-foundry's `attn_impl: triton`) run
    # outside PyTorch's dispatcher: only when asked for.
    Backend("flash3", "FlashAttention-3", sm=((9, 0), (9, 9)),
            sm_refusal="FlashAttention-3 runs on Hopper (sm90) only and this GPU is {sm}",
            refusal=_flash3_refusal, overlaps_softmax_from=(0, 0)),
    # flash-attn 1.x builds its kernels for Turing (sm75, fp16 only), Ampere and Hopper
    Backend("flash1", "FlashAttention-1 (flash-attn 1.x)", sm=((7, 5), (9, 0)),
            sm_refusal="FlashAttention-1 runs on sm75 to sm90 and this GPU is {sm}",
            refusal=_flash1_refusal),
    # Hopper's cuDNN kernels use its asynchronous Tensor Core instructions, as FA3 does
    Backend("cudnn", "cuDNN fused attention", sm=((8, 0), (12, 1)),
            sm_refusal="cuDNN attention needs an sm80+ GPU and this one is {sm}",
            refusal=_cudnn_refusal, aten=True, overlaps_softmax_from=(9, 0)),
    Backend("efficient", "memory-efficient (cutlass)", sm=((5, 0), (12, 1)),
            sm_refusal="memory-efficient attention needs an sm50+ GPU and this one is {sm}",
            refusal=_efficient_refusal, aten=True),
    Backend("triton", "Triton flash kernel", sm=((8, 0), (12, 1)),
            sm_refusal="the Triton flash kernel needs an sm80+ GPU and this one is {sm}",
            refusal=_triton_refusal),
    Backend("math", "math (GEMMs and softmax)"),
)  # fmt: skip
BY_NAME = {b.name: b for b in REGISTRY}
ALIASES = {alias: b.name for b in REGISTRY for alias in b.aliases}
# The kernels that run as one fused kernel, priced at an efficiency.
FUSED = tuple(b.name for b in REGISTRY if b.fused)
# What --attention takes: the dispatcher's own choice, each kernel (its aliases
# after it), and the model's own eager attention code instead of SDPA.
ATTENTION_CHOICES = (
    "auto", *(name for b in REGISTRY for name in (b.name, *b.aliases)), "eager"
)  # fmt: skip
