"""Subcommands of ``babelq``, one module each.

A command module exposes ``register(subparsers) -> None``: it adds its parser with
``subparsers.add_parser(name, ...)`` and sets ``func(args) -> int`` (the exit code) as a
default. Keep the module's top-level imports light (argparse, the standard library) and
import anything heavy or optional inside ``func``, so ``babelq --help`` stays fast and a
missing optional dependency only affects the command that needs it: :mod:`babelq.cli.main`
turns a ``ModuleNotFoundError`` for pyspark, redis, pika... raised while a command runs
into a ``pip install 'babelq[<extra>]'`` message.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from babelq.runtime.outage import OutagePolicy

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def write(text: str) -> None:
    """Write ``text`` to stdout as UTF-8 whatever the locale (CLI output only)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def write_bytes(data: bytes) -> None:
    """Write raw bytes to stdout."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


#: Environment variable that supplies the broker URL, so a password need not sit on a command line.
BROKER_ENV = "BABELQ_BROKER"


#: The broker option of every command; the spellings some commands used before stay as hidden aliases.
BROKER_OPTION = "--broker"
OLD_BROKER_OPTIONS = ("--url", "--transport")


def broker_argument(
    parser: argparse.ArgumentParser,
    *aliases: str,
    required: bool = True,
    example: str = "redis://127.0.0.1:6379/0",
    fallback: str | None = None,
    default: Any = None,
) -> None:
    """Add ``--broker URL``, defaulting to ``$BABELQ_BROKER`` (then ``fallback``, which the help
    names, when the command can run without one). Every command names its broker the same way;
    ``aliases`` (the ``--url``/``--transport`` a command had before) still parse into the same
    value but are left out of ``--help``. ``required`` is checked when the command runs
    (:func:`broker_url`), so the environment variable can stand in for the option. A subcommand
    whose command parses the option too passes ``default=argparse.SUPPRESS``, so as not to
    overwrite a ``--broker`` given before the subcommand's name."""
    shown = f"${BROKER_ENV}" + (f", else {fallback}" if fallback else "")
    parser.add_argument(
        BROKER_OPTION,
        dest="broker",
        metavar="URL",
        default=default,
        help=f"broker URL, e.g. {example} (default: {shown})",
    )
    if aliases:
        # Separate action so --help shows only --broker; SUPPRESS keeps its default from
        # touching the namespace, whose value is the visible option's None.
        parser.add_argument(
            *aliases, dest="broker", metavar="URL", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    parser.set_defaults(broker_required=required)


def broker_url(args: argparse.Namespace, flag: str = BROKER_OPTION) -> str | None:
    """The broker URL from the option, else ``$BABELQ_BROKER``; raises ConfigurationError when a
    required one is missing (names both ways to give it)."""
    from babelq.errors import ConfigurationError

    url = getattr(args, "broker", None) or os.environ.get(BROKER_ENV) or None
    if url is None and getattr(args, "broker_required", False):
        raise ConfigurationError(f"{flag}: no broker URL given; pass {flag} URL or set {BROKER_ENV}")
    return url


def required_broker_url(args: argparse.Namespace, flag: str = BROKER_OPTION) -> str:
    """:func:`broker_url` for a command that cannot run without a broker."""
    from babelq.errors import ConfigurationError

    url = broker_url(args, flag)
    if url is None:
        raise ConfigurationError(f"{flag}: no broker URL given; pass {flag} URL or set {BROKER_ENV}")
    return url


class DeprecatedOption(argparse.Action):
    """An option's former spelling: left out of ``--help``, it still parses into the new option's
    value (through ``convert``, when the unit changed) and says in one line which spelling to use."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str,
        *,
        replacement: str,
        convert: Callable[[Any], Any] | None = None,
        nargs: int | str | None = None,
        const: Any = None,
        type: Callable[[str], Any] | None = None,
        **_given: Any,  # argparse passes default, help...: an old spelling has neither
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=nargs, const=const, type=type,
            default=argparse.SUPPRESS, help=argparse.SUPPRESS,
        )  # fmt: skip
        self.replacement = replacement
        self.convert = convert

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated; use {self.replacement}",
              file=sys.stderr)
        value = self.const if self.nargs == 0 else values
        setattr(namespace, self.dest, self.convert(value) if self.convert else value)


def deprecated_option(
    parser: argparse.ArgumentParser,
    old: str,
    replacement: str,
    *,
    dest: str,
    type: Callable[[str], Any] = str,
    convert: Callable[[Any], Any] | None = None,
    flag: Any = None,
) -> None:
    """Accept ``old`` as a hidden spelling of ``replacement`` (which stores into ``dest``); a
    ``flag`` value makes ``old`` take no argument and store that value."""
    parser.add_argument(
        old, dest=dest, action=DeprecatedOption, replacement=replacement, convert=convert,
        type=type, nargs=0 if flag is not None else None, const=flag,
    )  # fmt: skip


#: ``--outage-timeout``'s default; the same as babelq.runtime.outage.DEFAULT_OUTAGE_SECONDS (not
#: imported here: building the parser must not load the runtime)
OUTAGE_SECONDS = 120


def outage_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--outage-timeout SECONDS``: every long-running command waits out an outage of its
    broker, ledger, sink or store for up to this long, then stops with one line (docs/cli.md)."""
    parser.add_argument(
        "--outage-timeout", type=float, default=OUTAGE_SECONDS, metavar="SECONDS",
        help=f"wait out an unreachable broker, ledger, sink or store for up to SECONDS, retrying with "
             f"backoff, then stop; a re-run continues (default: {OUTAGE_SECONDS})",
    )


def outage_policy(args: argparse.Namespace) -> OutagePolicy:
    """The policy ``--outage-timeout`` asks for; a negative bound is one line."""
    from babelq.errors import ConfigurationError
    from babelq.runtime.outage import OutagePolicy

    seconds = float(args.outage_timeout)
    if not seconds >= 0:
        raise ConfigurationError(f"--outage-timeout: must be 0 seconds or more, got {seconds:g}")
    return OutagePolicy(seconds)
