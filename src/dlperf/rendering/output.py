"""What a verb prints on stdout: one JSON document with --json, else the
terminal rendering of the same result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def show(
    result,
    render: Callable,
    as_json: bool,
    document: Callable | None = None,
    **options,
) -> None:
    """Print `result` as one JSON document (`document(result)`, else its
    `to_dict()`, else the dict itself), or with `render(result, **options)`."""
    if not as_json:
        render(result, **options)
    elif document is not None:
        print_json(document(result))
    else:
        print_json(result if isinstance(result, dict) else result.to_dict())
