"""What a ``redis://`` / ``rediss://`` URL may say, for both Redis layouts.

One class for the scheme, because the layout is itself an option (``laravel=1``): the layout's
own options default to ``None``, meaning "that layout's default" (``prefix`` is ``""`` in the
default layout and ``queues:`` in the Laravel one, the lease 30 s and 90 s).

redis-py's connection options are an explicit list, typed here and handed to redis-py in the
URL it opens (as written in the query, or formatted from a keyword). Any other key is refused
at open, as on every other scheme: redis-py would pass it to its connection class as a keyword,
and a typo would fail only at the first connect, with a ``TypeError``. A redis-py option missing
from the list is a one-line addition here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from babelq.transports.url_options import TransportURL, URLOptions, option, to_float

#: where the default layout keeps a delayed body (docs/transports-redis.md)
DelayMode = Literal["own", "lease", "ready"]

#: the fields of :class:`RedisOptions` that are redis-py's, passed on in the client's URL
CLIENT_OPTIONS = (
    "db", "username", "password", "socket_timeout", "socket_connect_timeout", "socket_keepalive",
    "retry_on_timeout", "health_check_interval", "max_connections", "client_name", "protocol",
    "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname",
)  # fmt: skip


def lapsing_seconds(value: object) -> float | None:
    """A lease in seconds; ``null``/``none`` (the babelqueue SDK's "never lapse") is refused."""
    if isinstance(value, str) and value.strip().lower() in ("null", "none"):
        raise ValueError(
            f"{value!r}: reservations that never lapse are not supported by babelq; give a number of seconds"
        )
    return None if value is None or value == "" else to_float(value)


@dataclass(frozen=True, slots=True)
class RedisOptions(URLOptions):
    """The options of ``redis://`` and ``rediss://`` (query or keywords)."""

    transport: ClassVar[str] = "redis"

    laravel: bool = False
    """Open the Laravel-compatible layout (:mod:`babelq.transports.redis_laravel`)."""
    laravel_compat: bool = False
    """The babelqueue SDK's spelling of ``laravel``."""
    prefix: str | None = None
    """Prepended to every key; ``None``: the layout's default (``""`` / ``queues:``)."""
    visibility_timeout: float | None = option(None, aliases=("retry_after",), parse=lapsing_seconds)
    """Lease of a reservation, seconds (``retry_after``: the babelqueue SDK's name); ``None``:
    the layout's default (30 / 90)."""
    poll_interval: float | None = None
    """Longest single block while ``reserve`` waits, seconds; ``None``: 0.5."""
    sweep_limit: int | None = None
    """Most delayed/lapsed members moved per reserve; ``None``: 1000."""
    delays: DelayMode | None = None
    """Where the default layout keeps a delayed body (docs/transports-redis.md); ``None``:
    ``lease``. The Laravel layout has one place only and refuses the option."""
    client: Any = None
    """A ready redis-py client (keyword only); the URL then only names it in errors."""

    db: int | None = None
    """redis-py: the database number (else the URL's path)."""
    username: str | None = None
    """redis-py: the ACL user (else the URL's user)."""
    password: str | None = None
    """redis-py: the password (else the URL's)."""
    socket_timeout: float | None = None
    """redis-py: seconds a command may take."""
    socket_connect_timeout: float | None = None
    """redis-py: seconds a connect may take (babelq's default: 10)."""
    socket_keepalive: bool | None = None
    """redis-py: TCP keepalive."""
    retry_on_timeout: bool | None = None
    """redis-py: retry a command once after a timeout."""
    health_check_interval: int | None = None
    """redis-py: seconds between PINGs of an idle connection."""
    max_connections: int | None = None
    """redis-py: size of the connection pool."""
    client_name: str | None = None
    """redis-py: ``CLIENT SETNAME`` of each connection."""
    protocol: int | None = None
    """redis-py: RESP version (2 or 3)."""
    ssl_cert_reqs: Literal["none", "optional", "required"] | None = None
    """redis-py, ``rediss://``: whether the server's certificate is checked."""
    ssl_ca_certs: str | None = None
    """redis-py, ``rediss://``: CA bundle file."""
    ssl_certfile: str | None = None
    """redis-py, ``rediss://``: client certificate file."""
    ssl_keyfile: str | None = None
    """redis-py, ``rediss://``: client key file."""
    ssl_check_hostname: bool | None = None
    """redis-py, ``rediss://``: check the certificate's host name."""

    @property
    def wants_laravel(self) -> bool:
        return self.laravel or self.laravel_compat

    def layout_options(self, *names: str) -> dict[str, Any]:
        """The layout's own options among ``names`` that were set (unset ones keep the
        constructor's default), plus the ready ``client`` when given."""
        chosen = {name: getattr(self, name) for name in (*names, "client")}
        return {name: value for name, value in chosen.items() if value is not None}


def client_url(link: TransportURL, keywords: dict[str, Any]) -> str:
    """The URL redis-py opens: ``link`` with only redis-py's options (already checked)."""
    return link.forwarded(CLIENT_OPTIONS, keywords)
