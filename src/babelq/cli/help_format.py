"""How every ``babelq`` command's ``--help`` states defaults, and how a usage error reads.

A wrong or missing option is two lines, whichever command it is given to: that command's
usage in one line (what it needs, not every option: ``-h`` lists those) and the error
(:class:`CliParser`, the class of every parser in the tree).

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
from typing import Any, NoReturn

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


def short_usage(parser: argparse.ArgumentParser) -> str:
    """``parser``'s usage in one line: its positionals, its required options, ``[options]`` for the
    rest and where to read them (``argparse``'s own usage lists every option, wrapped over lines)."""
    formatter = parser._get_formatter()
    words = [parser.prog]
    optional = False
    for action in parser._actions:
        if action.help is argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            words += [action.metavar if isinstance(action.metavar, str) else "COMMAND", "..."]
        elif not action.option_strings:
            words.append(formatter._format_args(action, action.dest))
        elif action.required:
            value = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            words.append(f"{action.option_strings[0]} {value}".strip())
        else:
            optional = True
    words += ["[options]"] if optional else []
    return f"usage: {' '.join(words)}  ({parser.prog} -h lists the options)"


class CliParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose usage error is two lines: :func:`short_usage` and
    ``<prog>: error: <message>``, exit code 2 (argparse's own prints the whole wrapped usage)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{short_usage(self)}\n{self.prog}: error: {text}\n")


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` were parsed for: ``parser``'s subcommand named in
    ``args``, and its own subcommand in turn (``babelq outbox init``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None) if action.dest is not argparse.SUPPRESS else None
            sub = action.choices.get(name) if isinstance(name, str) else None
            if sub is not None:
                return chosen_parser(sub, args)
    return parser
