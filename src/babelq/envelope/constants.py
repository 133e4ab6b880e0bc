"""Fixed facts of the schema_version 1 envelope (SPEC section 2)."""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 1
LANG: Final = "python"
LANGS: Final = frozenset({"php", "go", "python", "java", "dotnet", "node"})

#: Top-level keys in the order producers write them.
TOP_LEVEL_KEYS: Final = ("job", "trace_id", "data", "meta", "attempts")
#: Required meta keys in the order producers write them.
CORE_META_KEYS: Final = ("id", "queue", "lang", "schema_version", "created_at")

#: Keys that must never be emitted (SPEC section 2, "Forbidden").
FORBIDDEN_TOP_LEVEL: Final = frozenset({"timestamp"})
FORBIDDEN_META: Final = frozenset({"max_retries", "attempts", "source", "ts"})

#: The three dead-letter reasons the canonical schema allows (SPEC section 5).
DEAD_LETTER_REASONS: Final = frozenset({"failed", "unknown_urn", "poison"})

#: Optional meta extensions babelq defines (SPEC section 6), in the order we write them.
EXTENSION_META_KEYS: Final = (
    "correlation_id",
    "sharding_key",
    "deliver_at",
    "expire_at",
    "priority",
    "transaction_id",
)

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
JS_SAFE_MAX: Final = 2**53 - 1

DEFAULT_QUEUE: Final = "default"
