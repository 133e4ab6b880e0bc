"""The consumer's schema-version gate on a broker's native property, before the body is decoded.

Brokers whose bindings project ``meta.schema_version`` as a native property (SQS, Service Bus,
Pulsar, Kafka: ``bq-schema-version``; Artemis: ``bq_schema_version``) let a consumer refuse a
message of a version it does not speak without reading its body. One rule for all of them:

* absent, or *blank* (empty, or only the ASCII whitespace space, tab, LF, VT, FF, CR): no
  verdict; the body is decoded and its own ``meta.schema_version`` judged as usual;
* exactly ``"1"`` (compared as it is, never trimmed): decoded;
* anything else is refused without decoding, as poison: ``"2"``, ``"01"``, ``" 1"``, and
  values of non-ASCII whitespace or a byte-order mark, which are not blank.

Service Bus may carry the property as an AMQP number: the integer 1 passes, any other number
(``2``, ``0``, ``1.5``) is refused. Kafka headers are bytes: they are read as UTF-8, and bytes
that are not UTF-8 are refused.
"""

from __future__ import annotations

from typing import Final

#: the property's name on SQS, Service Bus, Pulsar and Kafka
PROPERTY: Final = "bq-schema-version"
#: the property's name on Artemis (JMS property names cannot hold "-")
ARTEMIS_PROPERTY: Final = "bq_schema_version"

#: what counts as blank: ASCII whitespace only, the same set in every SDK
_BLANK: Final = frozenset(" \t\n\x0b\x0c\r")
_SPOKEN: Final = "1"


def refusal(value: object) -> str | None:
    """Why a message whose native schema-version property is ``value`` (None: absent) must not
    be decoded; None when the body may be decoded."""
    if value is None:
        return None
    if type(value) is bytes:
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return f"native {PROPERTY} is not UTF-8 text: {value!r}"
    if type(value) is str:
        if value == _SPOKEN or all(ch in _BLANK for ch in value):
            return None
        return f"native {PROPERTY} {value!r} is not a schema version this consumer reads (1)"
    if type(value) is int and value == 1:
        return None
    return f"native {PROPERTY} {value!r} is not a schema version this consumer reads (1)"
