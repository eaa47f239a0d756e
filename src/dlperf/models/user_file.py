"""Models from the user's own file: `path/to/file.py:factory`.

dlperf calls `factory()`, which returns a module or `(module, inputs)`. This
runs the user's code, by design; it is built without weights too. An error
of the user's code is the user's to fix and says where; one raised inside
dlperf is dlperf's bug.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
from pathlib import Path

import torch
from torch import nn

from ..errors import DlperfError, InternalError, first_line, raised_by_dlperf
from .building import ParametersOnMeta, near
from .loaded import LoadedModel


def user_file_model(path: str, factory: str) -> LoadedModel:
    file = Path(path)
    if not file.is_file():
        raise DlperfError(f"model file {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"dlperf_user_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # runs the user's code, by design
    except (Exception, SystemExit) as err:
        raise DlperfError(
            f"importing {path} failed: {type(err).__name__}: {first_line(err)}"
        ) from None
    fn = getattr(module, factory, None)
    if not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise DlperfError(f"{path} has no function {factory!r}; {near(factory, names)}")
    label = f"{path}:{factory}()"
    _check_no_arguments(fn, label)
    made, inputs = _module_and_inputs(_build_user(fn, label, file), label)

    def real() -> nn.Module:
        return _module_and_inputs(_build_user(fn, label, file, real=True), label)[0]

    return LoadedModel(f"{path}:{factory}", made, inputs, "user", build_real=real)


def _module_and_inputs(made, label: str):
    """A factory returns a module or (module, inputs)."""
    inputs = None
    if isinstance(made, tuple) and len(made) == 2:
        made, inputs = made
    if not isinstance(made, nn.Module):
        raise DlperfError(f"{label} returned {type(made).__name__}, not an nn.Module")
    return made, inputs


def _check_no_arguments(fn, label: str) -> None:
    """dlperf calls the factory with no arguments: say so before it fails."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read (some builtins): let the call tell
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    needed = [p.name for p in parameters if p.default is p.empty and p.kind not in variadic]
    if needed:
        raise DlperfError(
            f"{label} needs arguments ({', '.join(needed)}) but dlperf calls it with none; "
            "give them defaults or add a factory without arguments"
        )


def _build_user(fn, label: str, file: Path, real: bool = False):
    """The user's factory built without weights, as named models are: on the
    meta device, else with parameters sent there as they are registered (for
    constructors that compute with tensors), else as written (for factories
    that move the model to a device themselves). `real`: as written only."""
    ways = (lambda: torch.device("meta"), ParametersOnMeta, contextlib.nullcontext)
    ways = ways[-1:] if real else ways
    for attempt, way in enumerate(ways, 1):
        try:
            with way():
                return fn()
        except (Exception, SystemExit) as err:
            if raised_by_dlperf(err):
                raise InternalError.of(err) from err
            if _out_of_memory(err):
                raise DlperfError(
                    f"{label} ran out of memory: {first_line(err, 200)}; dlperf needs no weights "
                    "or data: create tensors without a device (dlperf builds on the meta device)"
                ) from None
            if attempt == len(ways) or not isinstance(err, (NotImplementedError, RuntimeError)):
                raise DlperfError(
                    f"{label} failed{_where_in(err, file)}: {type(err).__name__}: {first_line(err)}"
                ) from None
    raise AssertionError("unreachable: the last way returns or raises")


def _out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError)
        and any(s in text for s in ("not enough memory", "allocate memory", "out of memory"))
    )


def _where_in(err: BaseException, file: Path) -> str:
    """' at model.py line 12': the innermost line of the user's file in the traceback."""
    line = None
    tb = err.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == file.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at {file.name} line {line}" if line else ""
