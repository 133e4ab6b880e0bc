"""``babelq``: the command line entry point.

Subcommands live in ``babelq.cli.commands.<name>`` (see that package for the module
contract). :data:`COMMANDS` lists them explicitly, so the order of ``--help`` is stable and
no plugin scanning happens at start-up. A command module that does not exist yet is left
out; one that cannot be imported (a missing optional dependency, a bug) still shows in
``--help`` and explains itself when run; a missing optional dependency raised while a
command runs becomes a ``pip install 'babelq[<extra>]'`` message with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers

log = logging.getLogger("babelq.cli")

COMMANDS: Final = ("encode", "inspect", "conformance", "worker", "demo", "ingest", "settle", "dlq")

#: Top-level module of an optional dependency -> the extra that installs it.
EXTRAS: Final = {
    "pyspark": "spark",
    "pyarrow": "spark",
    "pandas": "spark",
    "redis": "redis",
    "boto3": "sqs",
    "botocore": "sqs",
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "jsonschema": "schema",
}

EXIT_USAGE: Final = 2


def missing_extra(exc: ImportError) -> str | None:
    """The install hint for an ImportError caused by a missing optional dependency, else None."""
    name = getattr(exc, "name", None) or ""
    extra = EXTRAS.get(name.partition(".")[0])
    if extra is None:
        return None
    return f"needs the optional dependency {name!r}: pip install 'babelq[{extra}]'"


def _unavailable(name: str, subparsers: Subparsers, reason: str) -> None:
    placeholder = subparsers.add_parser(
        name, help=f"(unavailable: {reason})", description=f"unavailable: {reason}"
    )
    placeholder.set_defaults(accepts_any_arguments=True)

    def refuse(_args: argparse.Namespace) -> int:
        print(f"babelq {name}: {reason}", file=sys.stderr)
        return EXIT_USAGE

    placeholder.set_defaults(func=refuse)


def _register(subparsers: Subparsers, name: str) -> None:
    module_name = f"babelq.cli.commands.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            log.debug("command module %s does not exist; skipped", module_name)
            return
        reason = missing_extra(exc) or f"cannot import {module_name}: {exc}"
        _unavailable(name, subparsers, reason)
        return
    except Exception as exc:
        log.debug("command module %s failed to import", module_name, exc_info=True)
        _unavailable(name, subparsers, f"cannot import {module_name}: {type(exc).__name__}: {exc}")
        return
    try:
        module.register(subparsers)
    except Exception as exc:
        log.debug("command %s failed to register", name, exc_info=True)
        if name not in subparsers.choices:
            _unavailable(name, subparsers, f"failed to register: {type(exc).__name__}: {exc}")


def build_parser() -> argparse.ArgumentParser:
    """The ``babelq`` argument parser with every available command."""
    from babelq import __version__

    parser = argparse.ArgumentParser(
        prog="babelq",
        description="BabelQueue envelopes for Python: encode, inspect, check conformance, run pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"babelq {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug) to stderr"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        _register(subparsers, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``babelq`` with ``argv`` (default: the process arguments); returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accepts_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from babelq.errors import BabelqError

    try:
        return int(func(args))
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"babelq {args.command}: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except BabelqError as exc:
        print(f"babelq {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
