"""Where an outbox lives, from a URL: an SQLite file or a PostgreSQL database.

``sqlite:///abs/path.db`` (three slashes: absolute), ``sqlite://rel/path.db`` or a plain path
name an SQLite file; ``postgresql://`` / ``postgres://`` a PostgreSQL database (libpq URL,
psycopg 3). The relay and ``babelq outbox init`` open their own connections from it; producers
pass their own open connection to :meth:`babelq.outbox.Outbox.add` instead.

Every error names the option and shows the URL with its password masked.
"""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from pathlib import Path
from typing import Any

from babelq.errors import ConfigurationError, UnavailableError
from babelq.extras import optional_import
from babelq.outbox.schema import Dialect
from babelq.urls import one_line, redact, sqlite_file

#: seconds an SQLite connection waits for another writer's lock before giving up
SQLITE_BUSY_TIMEOUT = 30.0
#: seconds a PostgreSQL connect may take
CONNECT_TIMEOUT = 10


def dialect_of_url(url: str, option: str = "url") -> Dialect:
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres"
    if url.startswith("sqlite://") or "://" not in url:
        return "sqlite"
    raise ConfigurationError(
        f"{option}: unsupported outbox URL {redact(url)!r} (sqlite:///path.db, a file path or postgresql://...)"
    )


def sqlite_path(url: str, option: str = "--outbox") -> str:
    return sqlite_file(url, option) if url.startswith("sqlite://") else url


def connect(url: str, *, option: str = "url", autocommit: bool = False) -> Any:
    """An open connection to the outbox database of ``url``.

    SQLite: a connection in explicit-transaction mode (``isolation_level=None``: the caller
    writes ``BEGIN IMMEDIATE``), WAL journal so producers keep writing while a relay reads.
    PostgreSQL: a psycopg connection (``autocommit`` as asked). An unreachable database is an
    :class:`~babelq.errors.UnavailableError`; a malformed URL or a missing directory a
    :class:`~babelq.errors.ConfigurationError` naming ``option``.
    """
    if dialect_of_url(url, option) == "sqlite":
        path = sqlite_path(url, option)
        if not path:
            raise ConfigurationError(f"{option}: no SQLite file in {url!r} (sqlite:///path/app.db)")
        folder = Path(path).parent
        if not folder.is_dir():
            raise ConfigurationError(f"{option}: directory {folder} does not exist (for {path})")
        try:
            conn = sqlite3.connect(
                path, timeout=SQLITE_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise UnavailableError(f"outbox {path}: {exc}") from exc
            raise ConfigurationError(f"{option}: cannot open {path} as an SQLite database: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(f"{option}: {path} is not an SQLite database ({exc})") from None
        return conn
    psycopg = optional_import("psycopg", needed_for=f"{option}: a PostgreSQL outbox")
    try:
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.OperationalError as exc:
        raise UnavailableError(f"outbox {redact(url)}: {one_line(exc, first_line=True)}") from exc
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"{option}: {redact(url)!r} is not a usable PostgreSQL URL: {one_line(exc, first_line=True)}"
        ) from None


def close_quietly(conn: Any) -> None:
    if conn is not None:
        with suppress(Exception):
            conn.close()
