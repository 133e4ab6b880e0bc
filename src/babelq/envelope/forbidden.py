"""Non-canonical keys read on decode (docs/standard.md §2.2): warned about, never re-emitted.

Old producers still write ``timestamp`` at the top level, or ``meta.attempts``, ``meta.ts``,
``meta.source``, ``meta.max_retries``. A consumer keeps working with such a message (decode does
not refuse it) but says so, naming the key as a JSON pointer (``/meta/ts``), and a re-encode
leaves the key out. The first occurrence of each key in a process is a WARNING, later ones DEBUG,
so a fleet of old producers does not flood the log; :func:`observed` sees every one of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from babelq.envelope.constants import FORBIDDEN_META, FORBIDDEN_TOP_LEVEL

log = logging.getLogger("babelq.envelope")

_hooks: list[Callable[[str], None]] = []
_warned: set[str] = set()
_lock = threading.Lock()


def check(doc: Mapping[str, Any]) -> None:
    """Say which forbidden keys ``doc`` holds (nothing to do, and cheap, when it holds none)."""
    meta = doc.get("meta")
    # on every decode: plain lookups of the five names (no set built, no keys walked); a test
    # holds this list to FORBIDDEN_TOP_LEVEL and FORBIDDEN_META
    found_meta = meta.__class__ is dict and (
        "attempts" in meta or "ts" in meta or "source" in meta or "max_retries" in meta
    )
    if not found_meta and "timestamp" not in doc:
        return
    pointers = [f"/{key}" for key in sorted(FORBIDDEN_TOP_LEVEL) if key in doc]
    if found_meta:
        pointers += [f"/meta/{key}" for key in sorted(FORBIDDEN_META) if key in meta]  # type: ignore[operator]
    for pointer in pointers:
        _say(pointer)


def _say(pointer: str) -> None:
    for hook in tuple(_hooks):
        hook(pointer)
    with _lock:
        first = pointer not in _warned
        _warned.add(pointer)
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "forbidden key %s read and ignored (it is never re-emitted); the producer should "
        "stop writing it", pointer,
    )


@contextmanager
def observed() -> Iterator[list[str]]:
    """Collect the pointers of the forbidden keys decoded in the ``with`` block (any thread)."""
    seen: list[str] = []
    _hooks.append(seen.append)
    try:
        yield seen
    finally:
        _hooks.remove(seen.append)
