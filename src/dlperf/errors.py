"""The one exception type users see.

A `DlperfError` carries a single line that says what is wrong and how to fix
it. The command line prints that line and exits with status 2, never a
traceback.
"""


class DlperfError(ValueError):
    """Bad input: unknown name, malformed file, impossible shape."""


def close_matches(word: str, choices, n: int = 5) -> str:
    """A short 'did you mean' suffix, or the list of choices if none is close."""
    import difflib

    choices = sorted(choices)
    near = difflib.get_close_matches(word, choices, n=n, cutoff=0.5)
    if near:
        return "did you mean: " + ", ".join(near) + "?"
    return "choose from: " + ", ".join(choices)
