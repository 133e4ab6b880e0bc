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
