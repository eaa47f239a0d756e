"""What a failure while tracing means: the user's model, or dlperf's own bug.

An error the model raises under fake tensors becomes a one-line DlperfError
that names the module; one raised inside dlperf becomes an InternalError.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import NoReturn

from ..errors import DlperfError, InternalError, first_line, raised_by_dlperf

# Loggers that print a traceback of their own before re-raising an error that
# the user's model caused: dlperf reports that error in one line instead.
_NOISY_LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def quiet_torch_logs():
    """Drop the records of `_NOISY_LOGGERS` while tracing (restored after)."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    before = [log.disabled for log in loggers]
    for log in loggers:
        log.disabled = True
    try:
        yield
    finally:
        for log, was in zip(loggers, before, strict=True):
            log.disabled = was


def raise_explained(err: Exception, where: Callable[[], str]) -> NoReturn:
    """Raise what `err`, raised while tracing, means: a bug of dlperf's own
    (InternalError), or the user's model failing in module `where()`."""
    if raised_by_dlperf(err):
        raise InternalError.of(err) from err
    raise _model_error(err, where()) from None


def _data_dependent(err: BaseException) -> bool:
    """Whether `err` (or an error it wraps) comes from code that reads tensor values."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    kinds = (DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = str(err).lower()
        if isinstance(err, kinds) or "data-dependent" in text or "data dependent" in text:
            return True
        if ".item()" in text or "_local_scalar_dense" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def _model_error(err: Exception, where: str) -> DlperfError:
    """The one-line error for a failure of the user's model under fake tensors."""
    hint = (
        " (dlperf runs the model on fake tensors: code that reads tensor values, "
        "such as .item() or data-dependent shapes, cannot be traced)"
        if _data_dependent(err)
        else ""
    )
    return DlperfError(f"tracing failed in {where}: {type(err).__name__}: {first_line(err)}{hint}")
