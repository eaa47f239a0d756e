"""The `dlperf` command. Each verb parses its options, calls the public API,
and hands the result to a renderer; `--json` prints one JSON document."""

from __future__ import annotations

import argparse
import json
import sys

from .dtypes import DTYPES
from .errors import DlperfError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line with exit code 2."""

    def error(self, message):
        self.exit(2, f"dlperf: error: {message} (see `{self.prog} --help`)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def cmd_gpus(args) -> int:
    from .hardware import gpus
    from .report.terminal import gpus_table

    specs = gpus()
    if args.json:
        _print_json({"gpus": [s.summary() for s in specs]})
    else:
        gpus_table(specs)
    return 0


def cmd_gemm(args) -> int:
    from .gemm import gemm
    from .report.terminal import gemm_report

    result = gemm(args.m, args.n, args.k, dtype=args.dtype, gpu=args.gpu, batch=args.batch)
    if args.json:
        _print_json(result.to_dict())
    else:
        gemm_report(result)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dlperf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = sub.add_parser("gpus", help="list the bundled GPU catalogue")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_gpus)

    p = sub.add_parser("gemm", help="predict one GEMM: C[M,N] = A[M,K] B[K,N]")
    p.add_argument("m", type=_positive_int, metavar="M")
    p.add_argument("n", type=_positive_int, metavar="N")
    p.add_argument("k", type=_positive_int, metavar="K")
    p.add_argument("--gpu", default="a100", help="catalogue id, alias, spec file, or 'cpu'")
    p.add_argument("--dtype", default="fp16", choices=DTYPES)
    p.add_argument("--batch", type=_positive_int, default=1, help="batched GEMM count")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_gemm)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except DlperfError as err:
        sys.stderr.write(f"dlperf: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("dlperf: interrupted\n")
        return 130
