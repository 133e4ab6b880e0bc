"""Broker transports, chosen by URL.

>>> from babelq.transports import open_transport
>>> t = open_transport("memory://")

Schemes: ``memory://``, ``sqlite:///path/queue.db``, ``redis://``, ``amqp://``, ``sqs://``,
``kafka://``, ``sb://`` (Azure Service Bus), ``pulsar://`` and ``artemis://`` (AMQP 1.0).
Each transport module imports its broker client lazily, so ``import babelq.transports``
pulls in no client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from babelq.errors import ConfigurationError
from babelq.extras import optional_import
from babelq.transports.base import BaseTransport, Delivery, Outgoing, Transport
from babelq.urls import redact, split_url

#: scheme -> "module:Class"
_REGISTRY: dict[str, str] = {
    "memory": "babelq.transports.memory:MemoryTransport",
    "sqlite": "babelq.transports.sqlite:SQLiteTransport",
    "redis": "babelq.transports.redis:RedisTransport",
    "rediss": "babelq.transports.redis:RedisTransport",
    "amqp": "babelq.transports.amqp:AMQPTransport",
    "amqps": "babelq.transports.amqp:AMQPTransport",
    "sqs": "babelq.transports.sqs:SQSTransport",
    "kafka": "babelq.transports.kafka:KafkaTransport",
    "sb": "babelq.transports.servicebus:ServiceBusTransport",
    "servicebus": "babelq.transports.servicebus:ServiceBusTransport",
    "pulsar": "babelq.transports.pulsar:PulsarTransport",
    "pulsar+ssl": "babelq.transports.pulsar:PulsarTransport",
    "artemis": "babelq.transports.artemis:ArtemisTransport",
    "artemis+ssl": "babelq.transports.artemis:ArtemisTransport",
}

#: scheme -> the optional extra that installs its client (schemes not listed: the extra of that name)
_EXTRAS: dict[str, str] = {
    "rediss": "redis",
    "amqps": "amqp",
    "sb": "servicebus",
    "pulsar+ssl": "pulsar",
    "artemis+ssl": "artemis",
}


def transport_class(url: str) -> type[Transport]:
    """The transport class that serves ``url``'s scheme (its module is imported now, not before)."""
    scheme = split_url(url).scheme.lower()
    target = _REGISTRY.get(scheme)
    if target is None:
        raise ConfigurationError(
            f"url: unknown transport scheme {scheme!r} in {redact(url)!r}; "
            f"known: {', '.join(sorted(_REGISTRY))}"
        )
    module_name, _, class_name = target.partition(":")
    module = optional_import(
        module_name, needed_for=f"url: the {scheme!r} transport", extra=_EXTRAS.get(scheme, scheme)
    )
    cls: type[Transport] = getattr(module, class_name)
    return cls


def open_transport(url: str, **options: Any) -> Transport:
    """Open the transport for ``url``; ``options`` are its options as keywords (they win over
    the URL query's; docs/transports.md, "URL options")."""
    return transport_class(url).from_url(url, **options)


if TYPE_CHECKING:
    # mypy checks here that every registered class is a Transport, from_url included (at run
    # time nothing is imported: each module loads its client library only when used).
    from babelq.transports.amqp import AMQPTransport
    from babelq.transports.artemis import ArtemisTransport
    from babelq.transports.kafka import KafkaTransport
    from babelq.transports.memory import MemoryTransport
    from babelq.transports.pulsar import PulsarTransport
    from babelq.transports.redis import RedisTransport
    from babelq.transports.redis_laravel import RedisLaravelTransport
    from babelq.transports.servicebus import ServiceBusTransport
    from babelq.transports.sqlite import SQLiteTransport
    from babelq.transports.sqs import SQSTransport

    _REGISTERED: tuple[type[Transport], ...] = (
        MemoryTransport, SQLiteTransport, RedisTransport, RedisLaravelTransport, AMQPTransport,
        SQSTransport, KafkaTransport, ServiceBusTransport, PulsarTransport, ArtemisTransport,
    )  # fmt: skip


__all__ = ["BaseTransport", "Delivery", "Outgoing", "Transport", "open_transport", "transport_class"]
