"""The argument parser, built from the table of verbs (verbs.py)."""

from __future__ import annotations

import argparse

from .verbs import VERBS, Verb

DESCRIPTION = (
    "Why is my model slow on this GPU, what will it cost in memory, and what "
    "should I change? Predictions from shapes alone: no GPU, no weights."
)
DEBUG_HELP = "show the traceback when dlperf fails"


class _HelpFormatter(argparse.HelpFormatter):
    """Help that states each option's default, where it has one to state."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            not action.option_strings
            or action.nargs == 0  # flags: their help says what they switch
            or action.default in (None, argparse.SUPPRESS)
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line with exit code 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"dlperf: error: {message} (see `{self.prog} --help`)\n")


def build_parser(only_given: bool = False) -> argparse.ArgumentParser:
    """The `dlperf` parser; `only_given` leaves out every default, so that its
    namespace holds only what the command line says (`given_options`)."""
    from .. import __version__

    parser = _Parser(prog="dlperf", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"dlperf {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb in VERBS:
        _add_verb(sub, verb, only_given)
    return parser


def given_options(argv) -> frozenset[str]:
    """The options (their dests) the command line gives: what a --config's
    values never override, whatever the value typed."""
    found = vars(build_parser(only_given=True).parse_args(argv))
    return frozenset(found) - {"verb", "debug"}


def _add_verb(sub, verb: Verb, only_given: bool = False) -> None:
    if only_given:
        p = sub.add_parser(verb.name, argument_default=argparse.SUPPRESS)
    else:
        p = sub.add_parser(verb.name, help=verb.help)
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for opt in verb.options:
        if opt.exclusive and opt.exclusive not in exclusive:
            exclusive[opt.exclusive] = p.add_mutually_exclusive_group()
        target = exclusive[opt.exclusive] if opt.exclusive else p
        kwargs = {k: v for k, v in opt.kwargs.items() if not (only_given and k == "default")}
        target.add_argument(*opt.flags, **kwargs)
    # --debug after the verb too; SUPPRESS keeps the value given before it
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    if not only_given:
        p.set_defaults(func=verb.run, verb_parser=p, verb_options=verb.options, **verb.defaults)
