"""babelq: the BabelQueue envelope for Python, its broker bindings, an at-least-once worker
runtime and Spark pipelines.

Importing ``babelq`` is cheap: only the envelope core loads. ``babelq.App``,
``babelq.Message`` and ``babelq.open_transport`` load the runtime or the transports the first
time they are used (the error families of :mod:`babelq.errors` are here at once); Spark loads
only when you import ``babelq.spark`` or the pipelines.
"""

import importlib
from typing import TYPE_CHECKING, Any

from babelq.envelope import (
    Envelope,
    accepts,
    annotate,
    decode,
    dlq_name,
    encode,
    make,
    poison_record,
    redrive,
    rejection,
)
from babelq.errors import (
    BabelqError,
    ConfigurationError,
    DataError,
    DecodeError,
    EnvelopeError,
    PermanentError,
    PublishNotConfirmedError,
    TransportError,
    UnavailableError,
    URNError,
    URNFormatWarning,
)

if TYPE_CHECKING:
    from babelq.runtime import App, Message
    from babelq.transports import open_transport

#: what the top package offers from the layers above the envelope, loaded on first use
_LAZY = {
    "App": "babelq.runtime",
    "Message": "babelq.runtime",
    "open_transport": "babelq.transports",
}

__version__ = "0.1.0"

__all__ = [
    "App",
    "BabelqError",
    "ConfigurationError",
    "DataError",
    "DecodeError",
    "Envelope",
    "EnvelopeError",
    "Message",
    "PermanentError",
    "PublishNotConfirmedError",
    "TransportError",
    "URNError",
    "URNFormatWarning",
    "UnavailableError",
    "__version__",
    "accepts",
    "annotate",
    "decode",
    "dlq_name",
    "encode",
    "make",
    "open_transport",
    "poison_record",
    "redrive",
    "rejection",
]


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'babelq' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later uses find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
