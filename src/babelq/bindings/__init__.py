"""Broker bindings: how each broker carries the envelope natively (docs/standard.md §4).

A binding is pure: it imports no broker client and does no I/O, so it is tested without a
broker and shared by every transport. Each module offers a *projection* (produce: the
redundant, routable native metadata derived from the body) and a *reconciliation*
(consume: the message's attempts from the body and the broker's delivery counter). The
body itself is always the canonical envelope bytes; native metadata never replaces it.

Modules: :mod:`~babelq.bindings.rabbitmq` (AMQP 0-9-1), :mod:`~babelq.bindings.sqs`,
:mod:`~babelq.bindings.asb` (Azure Service Bus), :mod:`~babelq.bindings.pulsar`,
:mod:`~babelq.bindings.kafka`, :mod:`~babelq.bindings.artemis` (AMQP 1.0). Redis has no
projection: the list element is the body, byte for byte.

Every projection takes an :class:`~babelq.envelope.Envelope` or its document (a mapping).
A field the body lacks (a rejected or poison document on its way to a dead-letter queue)
is left out of the projection instead of being invented.
"""
