"""The envelope core: a pure codec for the frozen BabelQueue envelope (schema_version 1).

Standard library plus orjson only; no broker, no I/O.

>>> from babelq.envelope import make, decode
>>> env = make("urn:babel:orders:created", {"order_id": 1042}, queue="orders")
>>> back = decode(env.encode())
>>> back.urn, back.data, back.accepts()
('urn:babel:orders:created', {'order_id': 1042}, True)
"""

from babelq.envelope.constants import (
    DEAD_LETTER_REASONS,
    LANG,
    LANGS,
    SCHEMA_VERSION,
)
from babelq.envelope.dead_letter import annotate, dead_letter_block, dlq_name, exception_name, redrive
from babelq.envelope.ids import now_ms, uuid4
from babelq.envelope.make import encode, make
from babelq.envelope.model import Envelope
from babelq.envelope.payload import check_json
from babelq.envelope.poison import original_bytes, poison_record, record_or_poison
from babelq.envelope.read import decode
from babelq.envelope.urn import check_urn, urn_problem
from babelq.envelope.verdict import accepts, rejection, urn_of

__all__ = [
    "DEAD_LETTER_REASONS",
    "LANG",
    "LANGS",
    "SCHEMA_VERSION",
    "Envelope",
    "accepts",
    "annotate",
    "check_json",
    "check_urn",
    "dead_letter_block",
    "decode",
    "dlq_name",
    "encode",
    "exception_name",
    "make",
    "now_ms",
    "original_bytes",
    "poison_record",
    "record_or_poison",
    "redrive",
    "rejection",
    "urn_of",
    "urn_problem",
    "uuid4",
]
