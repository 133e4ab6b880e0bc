"""The error of data that breaks its URN's schema (defined, with every other, in :mod:`babelq.errors`)."""

from __future__ import annotations

from babelq.errors import SHOWN_ERRORS as SHOWN_ERRORS
from babelq.errors import SchemaViolationError as SchemaViolationError
