"""Fixed facts of the schema_version 1 envelope (docs/standard.md §2)."""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 1
LANG: Final = "python"
LANGS: Final = frozenset({"php", "go", "python", "java", "dotnet", "node"})

#: Top-level keys in the order producers write them.
TOP_LEVEL_KEYS: Final = ("job", "trace_id", "data", "meta", "attempts")
#: Required meta keys in the order producers write them.
CORE_META_KEYS: Final = ("id", "queue", "lang", "schema_version", "created_at")

#: Keys that must never be emitted (docs/standard.md §2.2).
FORBIDDEN_TOP_LEVEL: Final = frozenset({"timestamp"})
FORBIDDEN_META: Final = frozenset({"max_retries", "attempts", "source", "ts"})

#: The three dead-letter reasons the canonical schema allows (docs/standard.md §5).
DEAD_LETTER_REASONS: Final = frozenset({"failed", "unknown_urn", "poison"})

#: Optional meta extensions babelq defines (docs/standard.md §6), in the order we write them.
EXTENSION_META_KEYS: Final = (
    "correlation_id",
    "sharding_key",
    "deliver_at",
    "expire_at",
    "priority",
    "transaction_id",
)

#: The deepest an envelope may nest objects and arrays, the envelope object itself counting as
#: level 1 (so ``data`` is level 2). Producers refuse deeper, decode calls deeper poison, and
#: every encoder writes anything within it. 512 is PHP's default ``json_decode``/``json_encode``
#: depth, well inside orjson's (1024) and Spark's JSON parser's (1000), and leaves the standard
#: library's recursive codec room under Python's default recursion limit (docs/envelope.md).
MAX_DEPTH: Final = 512

#: The whitespace the standard trims and treats as blank (ASCII only: never U+00A0, U+3000...).
ASCII_WHITESPACE: Final = " \t\n\r\x0b\x0c"

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
JS_SAFE_MAX: Final = 2**53 - 1

DEFAULT_QUEUE: Final = "default"
