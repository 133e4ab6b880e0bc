"""Opening a transport from data source options, on the driver or inside a Spark worker.

Readers hold reservations across Spark calls, so they ask the transport class for the
constructor options such a holder needs (:meth:`~babelq.transports.BaseTransport.holder_options`):
a lease of ``visibilityTimeout`` seconds where reservations are leases (SQLite, Redis, SQS), a
prefetch window that fits every held delivery and ``basic.get`` for snapshots on AMQP, whose
reservations are bound to the connection instead. An option written in the URL's query wins
over these defaults. Writers only publish.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

from babelq.spark.datasource.options import SourceOptions
from babelq.transports import Transport, open_transport, transport_class
from babelq.urls import split_url

log = logging.getLogger(__name__)


def reserving_options(options: SourceOptions, *, max_held: int, snapshot: bool) -> dict[str, Any]:
    """The constructor options of a reader that holds up to ``max_held`` reservations."""
    cls = transport_class(options.url)
    wanted: dict[str, Any] = cls.holder_options(
        max_held=max_held, visibility_timeout=options.visibility_timeout, snapshot=snapshot
    )
    in_url = {key for key, _ in parse_qsl(split_url(options.url).query, keep_blank_values=True)}
    return {key: value for key, value in wanted.items() if key not in in_url}


def open_reserving(options: SourceOptions, *, max_held: int, snapshot: bool = False) -> Transport:
    """A transport for a reader holding up to ``max_held`` reservations (``snapshot``: a batch read)."""
    extra = reserving_options(options, max_held=max_held, snapshot=snapshot)
    log.debug("babelq data source: opening a %s reader with %s", split_url(options.url).scheme, extra)
    return open_transport(options.url, **extra)


def open_publishing(options: SourceOptions) -> Transport:
    """A transport used only to publish."""
    return open_transport(options.url)
