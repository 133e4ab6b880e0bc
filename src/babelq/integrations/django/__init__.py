"""Django: publish inside ``transaction.atomic()`` through the outbox, and ``manage.py`` commands.

Add ``"babelq.integrations.django"`` to ``INSTALLED_APPS`` and a ``BABELQ`` dict to the settings::

    BABELQ = {
        "BROKER": "redis://127.0.0.1:6379/0",   # where the relay and the worker connect
        "QUEUE": "orders",                      # the default queue of publish()
        "APP": "shop.worker:app",               # the babelq App manage.py babelq_worker runs
        "OUTBOX_TABLE": "babelq_outbox",        # optional
    }

``manage.py migrate`` creates the outbox table. :func:`publish` writes the envelope into it on
Django's own connection: inside a ``transaction.atomic()`` block it commits or rolls back with
the view's writes (a rolled-back view publishes nothing); outside one it commits at once.
``manage.py babelq_relay`` publishes committed rows to the broker, ``manage.py babelq_worker``
consumes with the App's handlers (both take the ``babelq relay``/``babelq worker`` options).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.outbox import DEFAULT_TABLE, Outbox


def settings() -> dict[str, Any]:
    """The ``BABELQ`` settings dict (empty when unset)."""
    from django.conf import settings as django_settings

    value = getattr(django_settings, "BABELQ", {})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"settings.BABELQ: must be a dict, got {type(value).__name__}")
    return dict(value)


def outbox_table() -> str:
    return str(settings().get("OUTBOX_TABLE", DEFAULT_TABLE))


def publish(
    urn: str,
    data: Mapping[str, Any] | object | None = None,
    *,
    queue: str | None = None,
    using: str = "default",
    delay_ms: int = 0,
    **extensions: Any,
) -> str:
    """Put an envelope in the outbox on Django's connection ``using``; returns its ``meta.id``.

    In a ``transaction.atomic()`` block it joins that transaction; outside one it runs in a
    transaction of its own and commits at once. The relay publishes it after the commit."""
    from django.db import connections, transaction

    target = queue or settings().get("QUEUE") or "default"
    envelope = make(urn, data, queue=str(target), **extensions)
    connection = connections[using]
    with transaction.atomic(using=using):  # a savepoint inside the caller's block, else its own
        connection.ensure_connection()
        outbox = Outbox(table=outbox_table())
        outbox.add(connection.connection, envelope, queue=str(target), delay_ms=delay_ms)
    return envelope.id


def outbox_url(using: str = "default") -> str:
    """The relay's URL for Django's database ``using`` (SQLite file or PostgreSQL)."""
    from django.db import connections

    connection = connections[using]
    params = connection.settings_dict
    if connection.vendor == "sqlite":  # the relay may run from another directory
        from pathlib import Path

        return f"sqlite:///{Path(str(params['NAME'])).resolve()}"
    if connection.vendor == "postgresql":
        from urllib.parse import quote

        user = quote(str(params.get("USER") or ""), safe="")
        password = quote(str(params.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = params.get("HOST") or "localhost"
        port = f":{params['PORT']}" if params.get("PORT") else ""
        return f"postgresql://{auth}{host}{port}/{params['NAME']}"
    raise ConfigurationError(
        f"DATABASES[{using!r}]: the outbox runs on SQLite or PostgreSQL, not {connection.vendor}"
    )
