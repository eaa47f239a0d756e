"""The exceptions users see, and which of them are dlperf's own fault.

A `DlperfError` carries a single line that says what is wrong and how to fix
it. The command line prints that line and exits with status 2, never a
traceback. An `InternalError` is a bug of dlperf itself: its one line says so
and asks for a report, so that it is never mistaken for the user's mistake.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


class DlperfError(ValueError):
    """Bad input: unknown name, malformed file, impossible shape."""


class InternalError(RuntimeError):
    """A bug in dlperf's own code (not the user's model or input)."""

    @classmethod
    def of(cls, err: BaseException) -> InternalError:
        """The one-line report of `err`, raised inside dlperf's own code."""
        where = ""
        frame = innermost_frame(err)
        if frame is not None:
            where = f" at {_shown_path(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno}"
        return cls(
            f"internal error in dlperf ({type(err).__name__}: {first_line(err)}{where}); "
            "this is a dlperf bug, not a problem with your model or input: "
            "please report it with the command line you ran"
        )


def first_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type name if it has none).

    A line that ends in a colon announces the next one (pydantic's and
    transformers' "validation error for ...:"), so the two are shown together
    rather than a sentence cut off at its colon."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__[:limit]
    shown = lines[0]
    for line in lines[1:]:
        if not shown.endswith(":"):
            break
        shown = f"{shown} {line}"
    return shown[:limit]


def innermost_frame(err: BaseException):
    """The traceback entry where `err` was raised (None if it was never raised)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def in_dlperf(filename: str) -> bool:
    """Whether a source file belongs to the dlperf package."""
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False  # "<string>", "<frozen ...>" and the like are not ours


def raised_by_dlperf(err: BaseException) -> bool:
    """Whether `err` is dlperf's own bug: its innermost frame is in the package.

    An error raised by torch or transformers while running the user's model has
    its innermost frame in those libraries (even when dlperf's dispatch mode
    sits further out on the stack), and one raised by the user's code in the
    user's file: both are the user's to fix, not ours.
    """
    frame = innermost_frame(err)
    return frame is not None and in_dlperf(frame.tb_frame.f_code.co_filename)


def _shown_path(filename: str) -> str:
    path = Path(filename).resolve()
    return f"dlperf/{path.relative_to(_PACKAGE)}" if in_dlperf(filename) else str(path)


def close_matches(word: str, choices, n: int = 5) -> str:
    """A short 'did you mean' suffix, or the list of choices if none is close."""
    import difflib

    choices = sorted(choices)
    near = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    if near:
        return "did you mean: " + ", ".join(near) + "?"
    return "choose from: " + ", ".join(choices)
