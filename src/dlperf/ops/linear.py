"""A linear layer's GEMM in a trace: the one rule that fp8 and int8 costing,
tensor-parallel planning and serving share.

nn.Linear (and its subclasses, `...Linear`) and Hugging Face's GPT-2 `Conv1D`
run as one `mm` or `addmm` per call; autograd's backward runs more `mm`s in
the same module. `aten.linear` and `matmul` reach the dispatcher already
decomposed into these.
"""

from __future__ import annotations

from ..tracing import OpEvent

LINEAR_PACKETS = frozenset({"aten.mm", "aten.addmm"})
CONV1D = "Conv1D"  # Hugging Face GPT-2's linear layer, weight stored [in, out]


def is_linear_module(module_type: str) -> bool:
    """Whether a module class name is a linear layer (float8 and int8 convert these)."""
    if module_type == CONV1D:
        return True
    return module_type.endswith("Linear") and module_type != "Bilinear"


def is_linear_gemm(event: OpEvent) -> bool:
    """Whether an event is a linear layer's mm/addmm."""
    return event.packet in LINEAR_PACKETS and is_linear_module(event.module_type)


def activation_operand(event: OpEvent) -> int | None:
    """Where a linear layer's GEMM reads its activation in `event.reads`
    (after the bias in addmm); None for any other event."""
    if not is_linear_gemm(event):
        return None
    index = 1 if event.packet == "aten.addmm" else 0
    return index if len(event.reads) > index else None
