"""Options of the ``babelq`` data source, parsed once and shipped to executors as a small dataclass.

Spark hands a data source its options as strings in a case-insensitive map; every reader and
writer needs the same few of them (where the broker is, which queue, how much per batch), so
they are read and checked in one place and fail early with a message that names the option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from babelq.errors import ConfigurationError

#: default lease (seconds) of a reader's reservations on leased transports (SQLite, Redis, SQS).
#: The streaming reader renews held leases while a micro-batch runs, so this does not bound a
#: batch's duration: it is how long a *killed* query's messages stay invisible before they come
#: back. AMQP ignores it (its reservations end with the connection).
DEFAULT_VISIBILITY_TIMEOUT = 60.0


def _get(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return None


def _int(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"babelq data source: option {name}={raw!r} is not an integer") from exc
    if value < minimum:
        raise ConfigurationError(f"babelq data source: option {name} must be >= {minimum}, got {value}")
    return value


def _float(options: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"babelq data source: option {name}={raw!r} is not a number") from exc
    if value < 0:
        raise ConfigurationError(f"babelq data source: option {name} must be >= 0, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"babelq data source: option {name}={raw!r} is not a boolean")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything the data source's readers and writers need, validated.

    - ``url``/``queue``: the broker (``sqlite:///q.db``, ``redis://...``) and logical queue.
    - ``max_messages_per_batch``: cap of one streaming micro-batch / one batch read.
    - ``num_partitions``: how many Spark partitions a batch is split into (at least: see the next).
    - ``max_messages_per_partition``: more partitions when a batch would put more than this many
      messages into one (executor memory: every body of a partition is in one Python worker).
    - ``visibility_timeout``: lease of a reader's reservations (renewed while held, see above).
    - ``reserve_batch``: messages asked from the broker per ``reserve`` call (where the driver
      reserves; an executor takes its whole share in one atomic call).
    - ``publish_batch``: bodies per ``publish_many`` call when writing.
    - ``consume``: batch reads only: ack what was read (``true``) instead of putting it back.
    """

    url: str
    queue: str
    max_messages_per_batch: int = 10_000
    num_partitions: int = 2
    max_messages_per_partition: int = 50_000
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT
    reserve_batch: int = 1_000
    publish_batch: int = 1_000
    consume: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, need_queue: bool = True) -> SourceOptions:
        opts = {str(k): str(v) for k, v in options.items()}
        url = _get(opts, "url")
        if not url:
            raise ConfigurationError("babelq data source: option 'url' is required (e.g. sqlite:///queue.db)")
        queue = _get(opts, "queue") or ""
        if need_queue and not queue:
            raise ConfigurationError("babelq data source: option 'queue' is required")
        visibility_timeout = _float(opts, "visibilityTimeout", DEFAULT_VISIBILITY_TIMEOUT)
        if visibility_timeout <= 0:
            raise ConfigurationError("babelq data source: option visibilityTimeout must be > 0 seconds")
        return cls(
            url=url,
            queue=queue,
            max_messages_per_batch=_int(opts, "maxMessagesPerBatch", 10_000, 1),
            num_partitions=_int(opts, "numPartitions", 2, 1),
            max_messages_per_partition=_int(opts, "maxMessagesPerPartition", 50_000, 1),
            visibility_timeout=visibility_timeout,
            reserve_batch=_int(opts, "reserveBatch", 1_000, 1),
            publish_batch=_int(opts, "publishBatch", 1_000, 1),
            consume=_bool(opts, "consume", False),
        )
