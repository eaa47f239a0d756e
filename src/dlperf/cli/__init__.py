"""The `dlperf` command. The verbs and their options are data (verbs.py,
options.py); each handler (handlers.py) resolves its run, calls the public
API and hands the result to a renderer (`dlperf.rendering`): `--json` prints
one JSON document. Exit codes: 0 done, 2 bad input (one line on stderr),
3 a bug of dlperf's own (`--debug` shows its traceback), 130 interrupted."""

from __future__ import annotations

import os
import sys
import traceback

from ..errors import DlperfError, InternalError, first_line
from .configured import apply_config
from .parser import build_parser, given_options

STDOUT_FD = 1

__all__ = ["build_parser", "main"]


def main(argv=None) -> int:
    """Run one verb: 0 on success, 2 for bad input, 3 for a bug of dlperf's own."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.given = given_options(sys.argv[1:] if argv is None else argv)
    try:
        apply_config(args)
        args.func(args)
        return 0
    except DlperfError as err:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"dlperf: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("dlperf: interrupted\n")
        return 130
    except BrokenPipeError:
        # the reader stopped early (`dlperf ... | head`): not an error; point
        # stdout at nothing so that flushing it at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), STDOUT_FD)
        return 0
    except Exception as err:  # anything else is dlperf's own failure, never the user's
        if args.debug:
            traceback.print_exc()
        bug = err if isinstance(err, InternalError) else InternalError.of(err)
        line = first_line(bug, limit=1000)
        hint = "" if args.debug else "; rerun with --debug for the traceback"
        sys.stderr.write(f"dlperf: {line}{hint}\n")
        return 3
