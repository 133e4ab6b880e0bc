"""``data`` given as a typed object: a pydantic model, a msgspec Struct or a dataclass.

:func:`babelq.envelope.make` (and so every publish) takes such an object where it takes a dict,
and writes exactly what the dict form would: the object becomes the JSON object its library
dumps, keys in field order, and then passes the same purity checks. Nothing is imported here:
the object itself says what it is, so the codec stays free of optional dependencies.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def as_dict(data: object) -> dict[str, Any] | None:
    """The JSON object of a typed ``data`` value, or None when it is not one of the types above."""
    kind = type(data)
    dump = getattr(data, "model_dump", None)
    if dump is not None and hasattr(kind, "model_fields"):  # pydantic v2
        dumped = dump(mode="json")
        return dumped if isinstance(dumped, dict) else None
    if hasattr(kind, "__struct_fields__"):  # msgspec: the object exists, so msgspec is installed
        import msgspec

        built = msgspec.to_builtins(data)
        return built if isinstance(built, dict) else None
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.asdict(data)
    return None
