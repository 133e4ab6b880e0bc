"""The two ways field protection fails, kept apart because the runtime treats them apart."""

from __future__ import annotations

from babelq.errors import BabelqError


class UndecryptableError(BabelqError, ValueError):
    """A protected field cannot be opened with any known key (wrong key, tampered, not a ciphertext).

    The message's fault, not the infrastructure's: retrying cannot fix it, so the consume
    middleware dead-letters it. ``field`` is the path of the value inside ``data``
    (``addresses[1].line``); the message never contains the value or key bytes.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"data.{field}: {problem}")


class ProtectError(BabelqError, ValueError):
    """A marked value cannot be protected (it is not JSON, e.g. NaN); the publish is refused."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"data.{field}: {problem}")
