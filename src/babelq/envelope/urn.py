"""URN naming rules (docs/standard.md §3): ``urn:babel:<bounded-context>:<event-or-command>``.

The standard recommends the format without enforcing it. babelq checks every URN it
produces: by default a bad URN only warns (:class:`~babelq.errors.URNFormatWarning`), in
strict mode it raises :class:`~babelq.errors.URNError`. Results are cached per URN, so the
check costs a dictionary lookup on the hot path.
"""

from __future__ import annotations

import re
import warnings
from functools import lru_cache

from babelq.errors import URNError, URNFormatWarning

_SHAPE = re.compile(r"urn:babel:[a-z0-9-]+:[a-z0-9_-]+(?:[.:][a-z0-9_-]+)*\Z")
_ALLOWED = re.compile(r"[a-z0-9:._-]*\Z")
_UUID_LIKE = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_NUMERIC_PART = re.compile(r"(?:^|[:.])\d+(?:[:.]|$)")

#: URNs already found to follow the rules; producers skip the check for these.
KNOWN_GOOD: set[str] = set()
_KNOWN_GOOD_LIMIT = 4096


@lru_cache(maxsize=4096)
def urn_problem(urn: str) -> str | None:
    """Why ``urn`` breaks the naming rules, or ``None`` when it follows them."""
    if not urn.isascii():
        return "URN must be ASCII"
    if not _ALLOWED.match(urn):
        bad = sorted({c for c in urn if not _ALLOWED.match(c)})
        return f"URN may only use [a-z0-9:._-]; found {''.join(bad)!r} (never a class name)"
    if not urn.startswith("urn:babel:"):
        return "URN must start with 'urn:babel:'"
    if not _SHAPE.match(urn):
        return "URN must look like urn:babel:<context>:<event>, e.g. urn:babel:orders:invoice.requested"
    rest = urn[len("urn:babel:") :]
    if _UUID_LIKE.search(rest) or _NUMERIC_PART.search(rest):
        return "URN must not carry payload ids (put ids in data)"
    return None


def check_urn(urn: str, *, strict: bool = False, stacklevel: int = 1) -> None:
    """Warn (default) or raise (``strict``) when ``urn`` breaks the naming rules.

    ``stacklevel`` 1 attributes the warning to the line calling this function; a wrapper
    passes 2 to point at its own caller, and so on.
    """
    if urn in KNOWN_GOOD:
        return
    problem = urn_problem(urn)
    if problem is None:
        if len(KNOWN_GOOD) < _KNOWN_GOOD_LIMIT:
            KNOWN_GOOD.add(urn)
        return
    if strict:
        raise URNError("job", f"{problem}: {urn!r}")
    warnings.warn(f"{problem}: {urn!r}", URNFormatWarning, stacklevel=stacklevel + 1)
