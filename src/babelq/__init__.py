"""babelq: the BabelQueue envelope for Python, its broker bindings, an at-least-once worker
runtime and Spark pipelines.

Importing ``babelq`` is cheap: only the envelope core loads. Brokers, the runtime and Spark
load when you import their subpackages (``babelq.transports``, ``babelq.runtime``,
``babelq.spark``).
"""

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
    DecodeError,
    EnvelopeError,
    URNError,
    URNFormatWarning,
)

__version__ = "0.1.0"

__all__ = [
    "BabelqError",
    "ConfigurationError",
    "DecodeError",
    "Envelope",
    "EnvelopeError",
    "URNError",
    "URNFormatWarning",
    "__version__",
    "accepts",
    "annotate",
    "decode",
    "dlq_name",
    "encode",
    "make",
    "poison_record",
    "redrive",
    "rejection",
]
