"""The Spark options shared by ``babelq demo``, ``ingest`` and ``settle``: ``--master`` and ``--conf``.

One way to pick the engine for every command that runs Spark: the commands add these options
with :func:`spark_arguments` and get their session from :func:`start_spark`, which hands the
master to :func:`babelq.spark.session.get_session` (the one place that decides between
``--master``, ``$BABELQ_SPARK_MASTER``, the master Spark was given and ``local[2]``) and refuses
broker and ledger targets the executors of a cluster could not share, both before Spark starts
(when the master is named) and on the master the session really got. :func:`start_spark` also
opens every target the command names (:func:`check_targets`: broker, ledger, sink, outbox)
before the JVM starts, so a wrong password or a server that is down is one line naming the
option, in every Spark command alike.

The same commands share how they show their work: ``--progress`` (:func:`progress_argument`,
:func:`open_progress`) and the babelq settings every session they start gets
(:func:`session_defaults`): Spark's own log level from ``-v`` (quiet by default: errors only,
:mod:`babelq.spark.log_level`) and, when progress is shown, executor heartbeats frequent enough
for Spark's metrics to move while a task runs.

Kept out of :mod:`babelq.cli.commands` because only the Spark commands need it; importing it
is cheap (pyspark is imported only when a session starts).
"""

from __future__ import annotations

import argparse
import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from babelq.pipelines.progress import Progress


def spark_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--master URL`` and the repeatable ``--conf KEY=VALUE``."""
    group = parser.add_argument_group("Spark")
    group.add_argument(
        "--master",
        metavar="URL",
        default=None,
        help="Spark master, e.g. spark://host:7077 or local[4] (default: $BABELQ_SPARK_MASTER, else the "
        "master spark-submit or spark-defaults.conf gives, else local[2])",
    )
    group.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        action="append",
        dest="spark_conf",
        default=[],
        help="a Spark setting, repeatable (e.g. spark.executor.memory=2g)",
    )


def progress_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--progress auto|bars|lines|none``."""
    from babelq.pipelines.progress import CHOICES, LINE_EVERY

    parser.add_argument(
        "--progress",
        choices=CHOICES,
        default="auto",
        help=f"how long stages show their progress on stderr: bars (drawn on a terminal), lines (a log line "
        f"every {LINE_EVERY:g} s), none; auto: bars when stderr is a terminal, else lines (default: auto)",
    )


def open_progress(args: argparse.Namespace) -> Progress:
    """The command's :class:`~babelq.pipelines.progress.Progress`, as ``--progress`` asks."""
    from babelq.pipelines.progress import Progress

    return Progress.choose(getattr(args, "progress", "auto"))


def session_defaults(args: argparse.Namespace, progress: Progress | None = None) -> dict[str, str]:
    """babelq's settings for the session a command starts (``--conf`` wins over them): Spark's log
    level, ``ERROR`` (errors only, no start-up banners) or with ``-v`` ``WARN`` (Spark's own
    start-up output and warnings), and the heartbeat that makes Spark's metrics live when
    ``progress`` shows anything."""
    from babelq.spark.log_level import LOG_LEVEL_CONF

    level = "WARN" if getattr(args, "verbose", 0) else "ERROR"
    return {LOG_LEVEL_CONF: level, **(progress.spark_conf if progress is not None else {})}


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    """The ``--conf`` settings as a dict (the last of a repeated key wins, as in spark-submit).

    A malformed item is a one-line ConfigurationError naming it: without ``=``, with an empty or
    spaced key, or a key outside ``spark.*`` (spark-submit would only warn and drop it, so the
    run would silently go without the setting).
    """
    from babelq.errors import ConfigurationError

    conf: dict[str, str] = {}
    for item in getattr(args, "spark_conf", None) or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise ConfigurationError(
                f"--conf {item!r}: expected KEY=VALUE, e.g. --conf spark.executor.memory=2g"
            )
        if not key.startswith("spark."):
            raise ConfigurationError(f"--conf {item!r}: Spark settings start with 'spark.'")
        conf[key] = value
    return conf


def check_before_spark(
    args: argparse.Namespace, *, broker: str | None = None, ledger: str | Path | None = None,
    sink: str | None = None,
) -> dict[str, str]:
    """Parse ``--conf`` and, when the master is named, refuse unshareable targets now, before a JVM
    starts. Returns the settings."""
    from babelq.pipelines.cluster_checks import check_cluster_targets
    from babelq.spark.session import explicit_master

    conf = spark_conf(args)
    master = explicit_master(args.master, conf)
    check_cluster_targets(master, broker=broker, ledger=ledger)
    if sink is not None:
        check_cluster_targets(master, ledger=sink, ledger_option="--sink")
    return conf


#: the words a target's own error starts with, replaced by the option the user gave
_TARGET_PREFIXES = (
    "url: ", "path: ", "ledger: ", "sink: ", "outbox: ", "--ledger: ", "--sink: ", "--outbox: ",
)


def _naming(option: str, exc: Exception) -> Exception:
    """``exc`` (a ConfigurationError or UnavailableError) re-worded to start with ``option``."""
    text = str(exc)
    for prefix in _TARGET_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    from babelq.errors import ConfigurationError, UnavailableError

    kind = ConfigurationError if isinstance(exc, ConfigurationError) else UnavailableError
    return kind(f"{option}: {text}")


def check_targets(
    *, broker: str | None = None, ledger: str | Path | None = None, sink: str | None = None,
    outbox: str | None = None,
) -> None:
    """Open and close every target given, so a wrong password, a server that is down or a file that
    cannot be opened is one line naming its option before Spark starts, not a failure inside
    Spark's tasks (which Spark reports from every task that meets it, at length)."""
    from babelq.errors import ConfigurationError, UnavailableError

    def broker_check(url: str) -> None:
        from babelq.pipelines.cluster_checks import sqlite_file
        from babelq.transports import open_transport

        path = sqlite_file(url)
        if path is not None and not os.path.exists(path):
            # opening would create the file, and a run refused later (a relative path on a
            # cluster's master, say) must leave nothing behind: its directory is what can fail
            parent = os.path.dirname(path) or "."
            if not os.path.isdir(parent):
                raise ConfigurationError(f"directory {parent!r} of the sqlite database {path!r} does not "
                                         "exist; create it first (babelq does not create directories)")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ConfigurationError(f"directory {parent!r} of the sqlite database {path!r}: "
                                         f"{os.strerror(errno.EACCES)}")
            return
        open_transport(url).close()

    def ledger_check(target: str | Path) -> None:
        from babelq.pipelines.ledger import open_ledger

        open_ledger(target).close()

    def sink_check(target: str) -> None:
        from babelq.pipelines.consume.sinks import open_sink

        open_sink(target).close()

    def outbox_check(url: str) -> None:
        from babelq.outbox.target import close_quietly, connect

        close_quietly(connect(url, option="--outbox"))

    checks: list[tuple[str, Any, Any]] = [
        ("--broker", broker, broker_check), ("--ledger", ledger, ledger_check),
        ("--sink", sink, sink_check), ("--outbox", outbox, outbox_check),
    ]
    for option, target, check in checks:
        if target is None:
            continue
        try:
            check(target)
        except (ConfigurationError, UnavailableError) as exc:
            raise _naming(option, exc) from exc


def start_spark(
    args: argparse.Namespace,
    app_name: str,
    *,
    broker: str | None = None,
    ledger: str | Path | None = None,
    sink: str | None = None,
    outbox: str | None = None,
    defaults: Mapping[str, str] | None = None,
) -> Any:
    """The command's SparkSession on the chosen master, after the checks of :func:`check_before_spark`
    and :func:`check_targets`; the targets are checked again on the master Spark actually gave (a
    session refused then is stopped before the error is raised)."""
    from babelq.errors import ConfigurationError
    from babelq.pipelines.cluster_checks import check_cluster_targets
    from babelq.spark.session import get_session

    conf = {**(defaults or {}), **check_before_spark(args, broker=broker, ledger=ledger, sink=sink)}
    check_targets(broker=broker, ledger=ledger, sink=sink, outbox=outbox)
    spark = get_session(app_name, master=args.master, **conf)
    try:
        check_cluster_targets(spark.sparkContext.master, broker=broker, ledger=ledger)
        if sink is not None:
            check_cluster_targets(spark.sparkContext.master, ledger=sink, ledger_option="--sink")
    except ConfigurationError:
        spark.stop()
        raise
    return spark
