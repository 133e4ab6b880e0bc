"""The replay mark on the wire: the header a redrive stamps beside the body, read and written.

Apart from :mod:`babelq.runtime.replay` because :class:`~babelq.runtime.message.Message` reads
the mark, while ``replay`` reads the current message (:mod:`babelq.runtime.context`): kept in
one module, the two would import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: The out-of-band header a redrive stamps on the messages it puts back (the babelqueue package's name).
REPLAY_HEADER: Final = "bq-replay-bypass"
#: The value a redrive writes (any non-empty value marks).
REPLAY_VALUE: Final = "1"


def marked(headers: Mapping[str, object]) -> bool:
    """Whether carried ``headers`` hold the replay mark (any non-empty value, as in the package)."""
    return bool(headers.get(REPLAY_HEADER))


def with_mark(headers: Mapping[str, str], mark: bool = True) -> dict[str, str]:
    """A copy of ``headers`` with the replay mark set (``mark``) or removed (not ``mark``)."""
    out = {name: value for name, value in headers.items() if name != REPLAY_HEADER}
    if mark:
        out[REPLAY_HEADER] = REPLAY_VALUE
    return out
