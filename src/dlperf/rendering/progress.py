"""The spinner the command line shows on stderr while a model is traced."""

from __future__ import annotations

import sys


class Spinner:
    """A spinner with an op count on stderr; silent when `quiet` (--json) or
    when stderr is no terminal. Entered, it gives the callback that tracing
    calls with the number of ops recorded so far."""

    def __init__(self, label: str, quiet: bool = False):
        self.label = label
        self.status = None
        self.enabled = not quiet and sys.stderr.isatty()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status(f"{self.label} ...")
            self.status.start()
        return self.update

    def update(self, count: int) -> None:
        if self.status:
            self.status.update(f"{self.label}: {count:,} ops recorded")

    def __exit__(self, *exc):
        if self.status:
            self.status.stop()
        return False
