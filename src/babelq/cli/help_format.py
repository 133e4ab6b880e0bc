"""How every ``babelq`` command's ``--help`` states defaults.

One formatter for the whole command tree, set by :func:`use_everywhere` from
:func:`babelq.cli.main.build_parser`, so a command module cannot forget it: an option whose
default is a value (a number, a name, a path) gets ``(default: VALUE)`` appended, as
:class:`argparse.ArgumentDefaultsHelpFormatter` would, but not the ``(default: None)`` /
``(default: False)`` that formatter prints for flags and for options whose absence means
something a help text says better in words. A help text that already states its default
(``(default: $BABELQ_BROKER)``) is left as written.
"""

from __future__ import annotations

import argparse
from typing import Any

#: The words a help text uses to state its own default.
DEFAULT_MARK = "(default"


def shows_value_default(action: argparse.Action) -> bool:
    """Whether ``action`` has a default worth printing as a value."""
    default: Any = action.default
    if default is None or default is argparse.SUPPRESS or isinstance(default, bool):
        return False
    if isinstance(default, (list, tuple, dict, set)) and not default:
        return False
    if action.help is argparse.SUPPRESS:
        return False
    return bool(action.option_strings) or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """:class:`argparse.HelpFormatter` that appends ``(default: VALUE)`` where
    :func:`shows_value_default` says so and the help does not state a default itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if DEFAULT_MARK in text or not shows_value_default(action):
            return action.help
        return f"{text} (default: %(default)s)".strip()


def subparsers_of(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The distinct parsers of ``parser``'s subcommands (aliases of one command counted once)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if all(sub is not seen for seen in found):
                    found.append(sub)
    return found


def use_everywhere(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every parser below it :class:`DefaultsHelpFormatter`."""
    parser.formatter_class = DefaultsHelpFormatter
    for sub in subparsers_of(parser):
        use_everywhere(sub)
