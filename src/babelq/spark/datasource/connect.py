"""Opening a transport from data source options, on the driver or inside a Spark worker.

Readers reserve with a visibility timeout long enough to survive a micro-batch and the
planning of the next one; writers only publish. Transports differ in which constructor
options they take, so the timeout is offered and dropped when a transport does not know it
(the broker's own default then applies, e.g. AMQP returns reservations on disconnect).
"""

from __future__ import annotations

import logging

from babelq.spark.datasource.options import SourceOptions
from babelq.transports import Transport, open_transport

log = logging.getLogger(__name__)


def open_reserving(options: SourceOptions) -> Transport:
    """A transport whose reservations stay owned for ``options.visibility_timeout`` seconds."""
    try:
        return open_transport(options.url, visibility_timeout=options.visibility_timeout)
    except TypeError:
        log.debug("transport for %s takes no visibility_timeout option; using its default", options.url)
        return open_transport(options.url)


def open_publishing(options: SourceOptions) -> Transport:
    """A transport used only to publish."""
    return open_transport(options.url)
