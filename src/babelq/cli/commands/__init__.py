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
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
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


def broker_argument(
    parser: argparse.ArgumentParser, *flags: str, required: bool = True, example: str = "redis://127.0.0.1:6379/0"
) -> None:
    """Add the broker URL option (``--broker`` unless ``flags`` name others), defaulting to
    ``$BABELQ_BROKER``. ``required`` is checked when the command runs (:func:`broker_url`), so the
    environment variable can stand in for the option."""
    parser.add_argument(
        *(flags or ("--broker",)),
        dest="broker",
        metavar="URL",
        default=None,
        help=f"broker URL, e.g. {example} (default: ${BROKER_ENV})",
    )
    parser.set_defaults(broker_required=required)


def broker_url(args: argparse.Namespace, flag: str = "--broker") -> str | None:
    """The broker URL from the option, else ``$BABELQ_BROKER``; raises ConfigurationError when a
    required one is missing (names both ways to give it)."""
    from babelq.errors import ConfigurationError

    url = args.broker or os.environ.get(BROKER_ENV) or None
    if url is None and getattr(args, "broker_required", False):
        raise ConfigurationError(f"{flag}: no broker URL given; pass {flag} URL or set {BROKER_ENV}")
    return url


def required_broker_url(args: argparse.Namespace, flag: str = "--broker") -> str:
    """:func:`broker_url` for a command that cannot run without a broker."""
    from babelq.errors import ConfigurationError

    url = broker_url(args, flag)
    if url is None:
        raise ConfigurationError(f"{flag}: no broker URL given; pass {flag} URL or set {BROKER_ENV}")
    return url
