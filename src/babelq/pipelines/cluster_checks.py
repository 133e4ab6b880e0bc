"""Refuse the pipeline targets that cannot work once executors are separate processes.

On a local master every task runs in the driver's JVM, with the driver's working directory.
On any other master (a standalone cluster, YARN, Kubernetes, even ``local-cluster``) each
executor is a process of its own, in a directory of its own, often on another host:

* an SQLite broker given as a *relative* path is opened by every executor relative to *its*
  working directory: ingest once published 19,662 messages into files nobody read again, and
  settle, reading the driver's file, found none and said "drained". An absolute path works
  where every host sees the same disk; a server broker (``redis://``...) always works.
* the SQLite ledger is one file that the executors posting payments would each need to lock;
  across hosts that is not a lock at all. PostgreSQL is the ledger of a cluster.

Both are refused with one line naming the option (:class:`~babelq.errors.ConfigurationError`),
before the first message moves. The checks are called twice by the commands: before Spark
starts when the master was named (``--master``, ``$BABELQ_SPARK_MASTER``), and on the master
the session actually got (spark-submit's, ``spark-defaults.conf``'s); the library's
:func:`~babelq.pipelines.ingest.ingest` and :func:`~babelq.pipelines.settle.settle` check the
session they are given (:func:`check_session_targets`), so the Python API refuses them too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from babelq.errors import ConfigurationError
from babelq.spark.session import is_local_master
from babelq.urls import redact, split_url


def sqlite_file(url: str) -> str | None:
    """The file of a ``sqlite://`` broker URL, else None.

    As the SQLite transport reads it: ``sqlite:///abs/q.db`` is absolute, ``sqlite://q.db`` relative.
    """
    parts = split_url(url)
    if parts.scheme.lower() != "sqlite":
        return None
    return unquote(parts.netloc + parts.path)


def _sqlite_ledger(ledger: str | Path) -> bool:
    text = str(ledger)
    if text.startswith(("postgresql://", "postgres://")):
        return False
    # a file path or sqlite:// URL (other schemes are refused by open_ledger with their own line)
    return text.startswith("sqlite://") or "://" not in text


def check_cluster_targets(
    master: str | None,
    *,
    broker: str | None = None,
    ledger: str | Path | None = None,
    broker_option: str = "--broker",
    ledger_option: str = "--ledger",
) -> None:
    """Raise ConfigurationError for a target executors on ``master`` cannot share (nothing for a
    local master, or when ``master`` is None: not known yet)."""
    if not master or is_local_master(master):
        return
    if broker is not None:
        path = sqlite_file(broker)
        if path is not None and not os.path.isabs(path):
            raise ConfigurationError(
                f"{broker_option}: {redact(broker)!r} is a relative SQLite path; on master {master} every "
                "executor would open it in its own working directory. Give an absolute path on a disk "
                "every host shares (sqlite:///shared/q.db) or a broker server (redis://...)"
            )
    if ledger is not None and _sqlite_ledger(ledger):
        raise ConfigurationError(
            f"{ledger_option}: the SQLite ledger ({redact(str(ledger))}) works in local mode only; on master "
            f"{master} use PostgreSQL on a cluster ({ledger_option} postgresql://user@host/db)"
        )


def session_master(spark: Any) -> str | None:
    """The master of ``spark``'s context; None where there is no context to ask (Spark Connect)."""
    try:
        return str(spark.sparkContext.master)
    except Exception:  # Spark Connect sessions have no SparkContext
        return None


def check_session_targets(
    spark: Any, *, broker: str | None = None, ledger: str | Path | None = None,
    broker_option: str = "url", ledger_option: str = "ledger",
) -> None:
    """:func:`check_cluster_targets` on the master ``spark`` runs on (the library functions' check:
    the options are named as the functions' parameters)."""
    check_cluster_targets(session_master(spark), broker=broker, ledger=ledger,
                          broker_option=broker_option, ledger_option=ledger_option)
