"""Exceptions a handler may raise to steer its message, and the runtime's own failure types."""

from __future__ import annotations

from babelq.errors import PermanentError as PermanentError
from babelq.errors import UnknownURNError as UnknownURNError

