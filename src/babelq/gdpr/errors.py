"""The two ways field protection fails, kept apart because the runtime treats them apart."""

from __future__ import annotations

from babelq.errors import ProtectError as ProtectError
from babelq.errors import UndecryptableError as UndecryptableError

