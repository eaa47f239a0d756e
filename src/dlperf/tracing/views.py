"""The one list of aten ops that move no data: views, metadata and allocation.

The recorder counts these calls instead of recording them, and the op
registry prices them at zero; both read `VIEWS` and `is_free` from here (the
ops package imports tracing, never the other way round).
"""

from __future__ import annotations

from functools import cache

import torch

# Overload packets (without the "aten." prefix) whose every overload moves no
# data: views and aliases, in-place metadata changes, shape queries, and
# allocation (an empty tensor is written by the op that fills it).
VIEWS = (
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "slice",
    "select",
    "as_strided",
    "alias",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "narrow",
    "diagonal",
    "view_as",
    "unflatten",
    "flatten",
    "movedim",
    "detach",
    "detach_",
    "_to_dense",
    "lift_fresh",
    "numpy_T",
    "mT",
    "unfold",
    "view_as_real",
    "view_as_complex",
    "_conj",
    "conj",
    "resolve_conj",
    "resolve_neg",
    "_neg_view",
    "set_",
    "resize_",
    "as_strided_",
    "squeeze_",
    "unsqueeze_",
    "t_",
    "transpose_",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "_local_scalar_dense",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "scalar_tensor",
    "_assert_async",
    "_assert_tensor_metadata",
    "_functional_assert_async",
    "record_stream",
    "_version",
    "size",
    "stride",
    "dim",
    "is_contiguous",
)

# Primitive (non-aten) calls describe tensors without touching memory either.
_FREE_PREFIXES = ("prim.",)


@cache
def free_names() -> frozenset[str]:
    """Every name of a free op: "aten.view" and each overload, "aten.view.default".

    Built on first use from the installed torch; a packet an older torch lacks
    is left out (there is nothing of it to record).
    """
    names = set()
    for packet in VIEWS:
        op = getattr(torch.ops.aten, packet, None)
        if op is None:
            continue
        names.add(f"aten.{packet}")
        names.update(f"aten.{packet}.{overload}" for overload in op.overloads())
    return frozenset(names)


def is_free(op_name: str) -> bool:
    """Whether an op (an overload such as "aten.view.default", or a packet such
    as "aten.view") moves no data and costs nothing."""
    return op_name in free_names() or op_name.startswith(_FREE_PREFIXES)
