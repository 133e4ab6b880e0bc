"""``babelq``: the command line entry point.

Subcommands live in ``babelq.cli.commands.<name>`` (see that package for the module
contract). :data:`COMMANDS` lists them explicitly, so the order of ``--help`` is stable and
no plugin scanning happens at start-up. A command module that does not exist yet is left
out; one that cannot be imported (a missing optional dependency, a bug) still shows in
``--help`` and explains itself when run; a missing optional dependency raised while a
command runs becomes a ``pip install 'babelq[<extra>]'`` message with exit code 2.

:func:`main` is the one error boundary of every command. Whatever escapes a command becomes
one line on stderr, ``babelq <command>: error: <what went wrong>``, and exit code 2: a person
running a command needs the input that failed and what to do, not 75 lines of a client
library's traceback (``-v`` prints that traceback too, for whoever debugs babelq itself). The
line is redacted with :func:`babelq.urls.redact_text`, because exception texts quote the
broker and database URLs they were given, passwords included.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from babelq.extras import missing_extra

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers

log = logging.getLogger("babelq.cli")

COMMANDS: Final = (
    "encode", "inspect", "conformance", "worker", "demo", "ingest", "publish", "settle", "consume", "dlq",
    "outbox", "relay", "schema", "expire",
)

EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

#: Longest error line printed (a client's message can quote a whole query or document).
MAX_ERROR_LINE: Final = 500

# A line that states an exception: ``pkg.SomeError: message``, Java's ``Caused by: x.YException: m``,
# Py4J's ``: java.lang.XException: m``. Only names ending like exception classes count, so
# "Logical Plan:" or "Current State: ACTIVE" in a Spark query dump are not mistaken for one.
_EXCEPTION_LINE = re.compile(
    r"^(?:Caused by: |: )?"
    r"((?:[A-Za-z_$][\w$]*\.)*[A-Za-z_$][\w$]*(?:Error|Exception|Failure|Fault|Exit|Interrupt))"
    r"(?::\s*(.*))?$"
)
# Where a wrapper's own words stop and a quoted traceback (Py4J, Spark's Python workers) begins.
_WRAPPER_NOISE = (
    "Traceback (most recent call last)",
    "An exception was raised by the Python Proxy",
    "An exception was thrown from the Python worker",
    "An error occurred while calling",
    "Return Message:",
)


def _root_cause(lines: Sequence[str]) -> tuple[str, str] | None:
    """The innermost exception stated in ``lines`` (a quoted Python traceback or Java stack trace)
    as (short class name, message): the last unindented ``Name: message`` line, preferring one
    whose message does not just introduce more text (``...: Traceback (most recent call
    last):``). None when no line states an exception."""
    found: list[tuple[str, str]] = []
    for line in lines:
        if line[:1].isspace():
            continue
        match = _EXCEPTION_LINE.match(line.rstrip())
        if match is not None:
            found.append((match.group(1).rpartition(".")[2], (match.group(2) or "").strip()))
    if not found:
        return None
    complete = [(name, message) for name, message in found if message and not message.endswith(":")]
    return (complete or found)[-1]


def error_line(exc: BaseException) -> str:
    """``exc`` as the one line a person reads: redacted, whitespace collapsed, at most
    :data:`MAX_ERROR_LINE` characters.

    A one-line message is kept as it is. A message holding a traceback or stack trace (a
    Spark/Py4J exception carries the Java one; a failed streaming query quotes its Python
    worker's) becomes its first line's own words plus the root cause's message. Errors babelq
    raises on purpose (:class:`~babelq.errors.BabelqError`) already name their input, so they are
    shown without their type; anything else keeps its type name, without which ``KeyError: 'x'``
    would read as just ``'x'``.
    """
    from babelq.errors import BabelqError
    from babelq.urls import redact_text

    try:
        text = str(exc)
    except Exception:  # a Py4J error whose JVM is gone cannot even describe itself
        text = ""
    lines = [line for line in redact_text(text).splitlines() if line.strip()]
    if not lines:
        line = ""
    elif len(lines) == 1 and not any(noise in lines[0] for noise in _WRAPPER_NOISE):
        line = lines[0]
    else:
        head = lines[0]
        cut = min((head.find(noise) for noise in _WRAPPER_NOISE if noise in head), default=-1)
        lead = (head[:cut] if cut >= 0 else head).strip().rstrip(":.").strip()
        root = _root_cause(lines)
        if root is None or (root[1] and root[1] in lead):
            line = lead or head
        else:
            cause = f"{root[0]}: {root[1]}" if root[1] else root[0]
            line = f"{lead}: {cause}" if lead else cause
    line = " ".join(line.split())
    if not isinstance(exc, BabelqError):
        name = type(exc).__name__
        if not line.startswith(name):
            line = f"{name}: {line}" if line else name
    if len(line) > MAX_ERROR_LINE:
        line = line[: MAX_ERROR_LINE - 3].rstrip() + "..."
    return line


def _report(command: str, exc: BaseException, *, verbose: bool) -> int:
    """Print ``exc`` as ``babelq <command>: error: <line>`` (after its redacted traceback when
    ``verbose``) and return the usage exit code."""
    from babelq.errors import BabelqError
    from babelq.urls import redact_text

    line = error_line(exc)
    if verbose:
        sys.stderr.write(redact_text("".join(traceback.format_exception(exc))))
    elif not isinstance(exc, BabelqError):
        line += " (babelq -v shows the traceback)"
    print(f"babelq {command}: error: {line}", file=sys.stderr)
    return EXIT_USAGE


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


LOG_LEVELS = ("debug", "info", "warning", "error")
#: commands that run until stopped: they log at INFO by default, so their first line says what they do
LONG_RUNNING = frozenset({"worker", "relay", "expire"})


def _logging_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    """``-v`` and ``--log-level``, before or after the command name (counted together)."""
    parser.add_argument(
        "-v", "--verbose", dest=f"{prefix}verbose", action="count", default=0,
        help="log more (-v info, -vv debug) and show tracebacks on errors",
    )  # fmt: skip
    parser.add_argument(
        "--log-level", dest=f"{prefix}log_level", choices=LOG_LEVELS, default=None,
        help="the level of log lines on stderr (default: warning; info for worker and relay)",
    )  # fmt: skip


def _logging_options_below(parser: argparse.ArgumentParser, depth: int) -> None:
    """The logging options on every parser below ``parser``, each level under its own names: a
    subcommand's defaults would otherwise overwrite the count its command's ``-v`` made."""
    from babelq.cli.help_format import subparsers_of

    for sub in subparsers_of(parser):
        _logging_options(sub, "sub_" if depth == 1 else f"sub{depth}_")
        _logging_options_below(sub, depth + 1)


def verbosity(args: argparse.Namespace) -> int:
    """How many ``-v`` were given, before and after the command names."""
    return int(args.verbose) + sum(
        int(value) for name, value in vars(args).items() if name.endswith("_verbose") and value)


def log_level(args: argparse.Namespace) -> int:
    """The level ``-v``/``--log-level`` ask for; a long-running command logs at INFO by default
    (its start-up line says what it consumes or publishes)."""
    # given after a command (sub_log_level, sub2_log_level for `outbox init`...) or before it
    given_after = [value for name, value in vars(args).items() if name.endswith("_log_level") and value]
    named = given_after[-1] if given_after else getattr(args, "log_level", None)
    if named is not None:
        return int(getattr(logging, named.upper()))
    verbose = args.verbose
    if verbose == 0 and getattr(args, "command", None) in LONG_RUNNING:
        return logging.INFO
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


def build_parser() -> argparse.ArgumentParser:
    """The ``babelq`` argument parser with every available command."""
    from babelq import __version__
    from babelq.cli.help_format import CliParser, use_everywhere

    parser: argparse.ArgumentParser = CliParser(
        prog="babelq",
        description="BabelQueue envelopes for Python: encode, inspect, check conformance, run pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"babelq {__version__}")
    _logging_options(parser, "")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        _register(subparsers, name)
    _logging_options_below(parser, 1)  # `babelq worker -v` as well as `babelq -v worker`
    use_everywhere(parser)
    return parser


def _warnings_in_one_line(command: str) -> None:
    """A Python warning (a URN outside the standard's form, say) is one line naming the command,
    not the source file and line Python shows; ``-v`` keeps Python's own form."""

    def show(  # noqa: PLR0917 - the signature warnings.showwarning is called with
        message: Warning | str, category: type[Warning], filename: str, lineno: int,
        file: Any = None, line: str | None = None,
    ) -> None:
        text = " ".join(str(message).split())
        print(f"babelq {command}: warning: {text}", file=sys.stderr)

    warnings.showwarning = show


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>`` prints every thread's Python stack to stderr, and the command goes on:
    what an operator (or a test) asks of a worker or relay that seems stuck."""
    import faulthandler
    import signal

    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None or threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError, RuntimeError):  # stderr without a file descriptor
        faulthandler.register(usr1, file=sys.stderr, all_threads=True, chain=False)


def _catch_interrupts(verbose: bool) -> tuple[threading.Event, Any]:
    """Handle Ctrl-C (SIGINT) as babelq's own: returns the event it sets, and the handler it replaced.

    The first SIGINT sets the event and raises KeyboardInterrupt, as Python's own handler does;
    without ``-v`` it also keeps what the interrupt cuts off the screen: Py4J's threads log the
    calls to the JVM it broke, threads end with tracebacks, and the JVM and its Python workers
    report the jobs and connections it ended. A second SIGINT, while the command ends its
    processes (:func:`_end_processes`), is ignored: they are being ended already."""
    import signal

    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return interrupted, None

    def handler(_signum: int, _frame: Any) -> None:
        if interrupted.is_set():
            return
        interrupted.set()
        if not verbose:
            logging.disable(logging.CRITICAL)
            threading.excepthook = lambda _args: None
            jvm_output = sys.modules.get("babelq.spark.jvm_output")
            if jvm_output is not None:
                jvm_output.mute()
        raise KeyboardInterrupt

    return interrupted, signal.signal(signal.SIGINT, handler)


def _driver_jvm() -> Any:
    """The Spark driver JVM this process runs now, if any (without importing pyspark)."""
    if "pyspark" not in sys.modules:
        return None
    from babelq.spark.shutdown import driver_jvm

    return driver_jvm()


def _end_processes(before: Any) -> None:
    """End the Spark driver JVM the command launched, and its Python workers, before the command
    exits (:func:`babelq.spark.shutdown.end_jvm`): a command ends when its processes do. A JVM
    that was running ``before`` the command (``main`` called in a process with a session of its
    own) is left to its owner."""
    if "pyspark" in sys.modules:
        from babelq.spark.shutdown import end_jvm

        end_jvm(keep=before)


def _interrupted_line(command: str) -> int:
    """The one line of an interrupted command; returns exit code 130."""
    print(f"babelq {command}: interrupted", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``babelq`` with ``argv`` (default: the process arguments); returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accepts_any_arguments", False):
        from babelq.cli.help_format import chosen_parser

        # the command's own usage, not the top level's: the flag was given to the command
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    args.verbose = verbosity(args)
    level = log_level(args)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose == 0:
        # Py4J logs a Spark foreachBatch function's exception with its whole traceback before
        # handing it back to the JVM, which fails the query with it; the command then reports
        # that same exception as its one error line, so the log record only repeats it at length.
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _stacks_on_sigusr1()
    verbose = args.verbose > 0
    if not verbose:
        _warnings_in_one_line(args.command)
    interrupted, previous = _catch_interrupts(verbose)
    jvm_before = _driver_jvm()
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return _interrupted_line(args.command)
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            return _report(args.command, exc, verbose=verbose)
        print(f"babelq {args.command}: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        if interrupted.is_set():  # what the interrupt broke (a Py4J call cut off), not an error of its own
            return _interrupted_line(args.command)
        return _report(args.command, exc, verbose=verbose)
    finally:
        if interrupted.is_set() and not verbose:
            # the interrupted line is the last word: what the threads and connections the interrupt
            # cut print while the processes end and Python exits is not shown
            sys.stderr.flush()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        _end_processes(jvm_before)
        if previous is not None:
            import signal

            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
