"""URL options: one parser, one policy, one message shape on every scheme (no broker needed).

* the parser (:mod:`babelq.transports.url_options`), property-based: options written to a query
  read back equal; whatever a URL or a keyword holds, the outcome is the typed options or one
  :class:`ConfigurationError` line that names the option and never shows a secret;
* per transport: every documented option parses to its typed field, the options classes agree
  with their constructors' defaults and with the docs;
* the policy: an unknown key is refused with the same message shape on every scheme (query or
  keyword), a bad number or boolean names the option, a key given twice is refused;
* precedence: keyword > query > the rest of the URL > default, and the Spark data source's
  reader defaults give way to what the URL spells.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from babelq.errors import ConfigurationError
from babelq.transports import open_transport, transport_class
from babelq.transports.amqp import AMQPOptions, AMQPTransport
from babelq.transports.amqp_client import AMQPConnectionOptions, ConnectionParameters
from babelq.transports.artemis import ArtemisOptions, ArtemisTransport
from babelq.transports.kafka import KafkaOptions, KafkaTransport
from babelq.transports.memory import MemoryOptions, MemoryTransport
from babelq.transports.pulsar import PulsarOptions, PulsarTransport
from babelq.transports.redis_options import CLIENT_OPTIONS, RedisOptions
from babelq.transports.servicebus import ServiceBusOptions, ServiceBusTransport
from babelq.transports.sqlite import SQLiteOptions, SQLiteTransport
from babelq.transports.sqs import SQSOptions, SQSTransport
from babelq.transports.url_options import TransportURL, URLOptions, one_line
from babelq.urls import MASK

DOCS = Path(__file__).resolve().parents[2] / "docs"
SECRET = "Zq-s3cr3t-Pw"

#: options class -> a URL of its scheme (no broker is contacted: parsing comes first)
SCHEMES: dict[type[URLOptions], str] = {
    MemoryOptions: "memory://",
    SQLiteOptions: "sqlite:///tmp/babelq-never-created/q.db",
    RedisOptions: "redis://127.0.0.1:6379/15",
    AMQPOptions: "amqp://guest:guest@127.0.0.1:5672/%2F",
    SQSOptions: "sqs://eu-west-1",
    KafkaOptions: "kafka://b1:9092",
    ServiceBusOptions: "sb://ns.servicebus.windows.net",
    PulsarOptions: "pulsar://127.0.0.1:6650",
    ArtemisOptions: "artemis://guest:guest@127.0.0.1:5672",
}
CLASSES = [*SCHEMES, AMQPConnectionOptions]

#: options class -> the docs that must name each of its options
DOCUMENTED_IN: dict[type[URLOptions], tuple[str, ...]] = {
    MemoryOptions: ("transports.md",),
    SQLiteOptions: ("transports.md",),
    RedisOptions: ("transports.md", "transports-redis.md"),
    AMQPOptions: ("transports-amqp-sqs.md",),
    SQSOptions: ("transports-amqp-sqs.md",),
    KafkaOptions: ("transports-kafka.md",),
    ServiceBusOptions: ("transports-servicebus.md",),
    PulsarOptions: ("transports-pulsar.md",),
    ArtemisOptions: ("transports-artemis.md",),
}

#: options class -> its transport (for defaults), and options whose default is decided elsewhere
CONSTRUCTORS: dict[type[URLOptions], type[Any]] = {
    MemoryOptions: MemoryTransport,
    SQLiteOptions: SQLiteTransport,
    AMQPOptions: AMQPTransport,
    SQSOptions: SQSTransport,
    KafkaOptions: KafkaTransport,
    ServiceBusOptions: ServiceBusTransport,
    PulsarOptions: PulsarTransport,
    ArtemisOptions: ArtemisTransport,
}

FLAT_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


# -- the parser, property-based ------------------------------------------------------------------
def _values(cls: type[URLOptions], name: str) -> st.SearchStrategy[Any]:
    """Valid values of one option, from its type (custom ones by hand)."""
    if (cls, name) == (KafkaOptions, "retry_tiers"):
        return st.lists(st.integers(1, 10**9), max_size=5, unique=True).map(lambda xs: tuple(sorted(xs)))
    hint = get_type_hints(cls)[name]
    optional = type(None) in get_args(hint)
    if optional:
        [hint] = [arg for arg in get_args(hint) if arg is not type(None)]
    if get_origin(hint) is Literal:
        inner: st.SearchStrategy[Any] = st.sampled_from(get_args(hint))
    elif hint is bool:
        inner = st.booleans()
    elif hint is int:
        inner = st.integers(-(10**12), 10**12)
    elif hint is float:
        inner = st.floats(allow_nan=False, allow_infinity=False)
    elif hint is str:
        inner = FLAT_TEXT.filter(bool) if optional else FLAT_TEXT
    else:
        return st.none()  # an object: keyword only, not in a query
    return st.one_of(st.none(), inner) if optional else inner


@st.composite
def _options(draw: st.DrawFn) -> URLOptions:
    cls = draw(st.sampled_from(CLASSES))
    chosen = {item.name: draw(_values(cls, item.name)) for item in dataclasses.fields(cls)}
    return cls(**chosen)


@given(_options())
def test_options_written_to_a_query_read_back_equal(options: URLOptions) -> None:
    cls = type(options)
    url = TransportURL.split(f"{SCHEMES.get(cls, 'amqp://h')}?{options.query()}")
    assert cls.parse(url) == options
    assert "\n" not in options.describe()


def _accepted_or_one_line(cls: type[URLOptions], url: str, keywords: dict[str, Any], key: str) -> None:
    try:
        cls.parse(TransportURL.split(url), keywords)
    except ConfigurationError as exc:  # never a bare ValueError/TypeError, never two lines
        text = str(exc)
        assert "\n" not in text and "\r" not in text
        assert SECRET not in text and quote(SECRET, safe="") not in text
        assert text.startswith(f"{one_line(key)}: "), text


GARBAGE = st.one_of(
    FLAT_TEXT,
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(FLAT_TEXT, st.integers(), max_size=1),
)


@given(
    cls=st.sampled_from(CLASSES),
    key=st.one_of(
        st.sampled_from(["prefetch", "heartbeat", "create", "verify", "retry_tiers", "db"]), FLAT_TEXT
    ),
    value=FLAT_TEXT,
)
def test_any_query_value_is_accepted_or_one_line_without_the_secret(
    cls: type[URLOptions], key: str, value: str
) -> None:
    scheme = SCHEMES.get(cls, "amqp://").split("://")[0]
    url = f"{scheme}://user:{quote(SECRET, safe='')}@h/?{quote(key)}={quote(value)}"
    _accepted_or_one_line(cls, url, {}, key)


@given(cls=st.sampled_from(CLASSES), data=st.data())
def test_any_keyword_value_is_accepted_or_one_line(cls: type[URLOptions], data: st.DataObject) -> None:
    name = data.draw(st.one_of(st.sampled_from(cls.names()), FLAT_TEXT))
    _accepted_or_one_line(cls, SCHEMES.get(cls, "amqp://h"), {name: data.draw(GARBAGE)}, name)


#: secret options, and a class that has each
SECRET_OPTIONS: dict[str, type[URLOptions]] = {
    "sasl_password": KafkaOptions, "token": PulsarOptions, "shared_access_key": ServiceBusOptions,
    "sas_token": ServiceBusOptions, "connection_string": ServiceBusOptions,
    "aws_secret_access_key": SQSOptions, "aws_session_token": SQSOptions, "password": RedisOptions,
}  # fmt: skip


@pytest.mark.parametrize(("name", "cls"), SECRET_OPTIONS.items())
def test_a_secret_option_never_shows_its_value(name: str, cls: type[URLOptions]) -> None:
    parsed = cls.parse(TransportURL.split(f"{SCHEMES[cls]}?{name}={SECRET}"))
    assert getattr(parsed, name) == SECRET
    assert SECRET not in parsed.describe() and f"{name}={MASK}" in parsed.describe()
    with pytest.raises(ConfigurationError) as caught:  # the URL an error shows masks it too
        cls.parse(TransportURL.split(f"{SCHEMES[cls]}?{name}={SECRET}&bogus_key=1"))
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigurationError) as caught:  # a secret given as something else than text
        cls.parse(TransportURL.split(SCHEMES[cls]), {name: [SECRET]})
    assert SECRET not in str(caught.value) and str(caught.value).startswith(f"{name}: not a string: {MASK}")


def test_an_unknown_key_may_be_a_mistyped_secret_so_its_value_is_hidden() -> None:
    with pytest.raises(ConfigurationError) as caught:
        KafkaOptions.parse(TransportURL.split(f"kafka://b1?sasl_pasword={SECRET}"))
    text = str(caught.value)
    assert SECRET not in text and "sasl_pasword=***" in text and "did you mean 'sasl_password'?" in text


# -- one policy, one message shape, every scheme ---------------------------------------------------
@pytest.mark.parametrize("cls", list(SCHEMES), ids=lambda c: c.__name__)
def test_an_unknown_query_key_is_refused_the_same_way_on_every_scheme(cls: type[URLOptions]) -> None:
    url = SCHEMES[cls]
    with pytest.raises(ConfigurationError) as caught:
        open_transport(f"{url}?bogus_option=1")
    text = str(caught.value)
    shape = rf"^bogus_option: not an option of the {cls.transport} transport \(known: [a-z_, ]+\) in \S+://"
    assert re.match(shape, text), text
    assert "\n" not in text and "bogus_option=***" in text
    with pytest.raises(ConfigurationError) as as_keyword:
        open_transport(url, bogus_option=1)
    assert re.match(shape, str(as_keyword.value)), str(as_keyword.value)


@pytest.mark.parametrize(
    ("url", "key", "meant"),
    [
        ("sqlite:///tmp/q.db", "visibilty_timeout", "visibility_timeout"),
        ("redis://h/0", "socket_timout", "socket_timeout"),
        ("amqp://h/", "hearbeat", "heartbeat"),
        ("kafka://b1", "groupp", "group"),
        ("pulsar://h:6650", "Prefetch", "prefetch"),
    ],
)
def test_a_misspelt_key_suggests_the_closest_option(url: str, key: str, meant: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^{key}: not an option .*did you mean {meant!r}\?"):
        open_transport(f"{url}?{key}=1")


@pytest.mark.parametrize(
    ("url", "option", "kind"),
    [
        ("memory://?visibility_timeout=soon", "visibility_timeout", "a number"),
        ("sqlite:///tmp/q.db?create=maybe", "create", "a boolean"),
        ("sqlite:///tmp/q.db?busy_timeout=soon", "busy_timeout", "a number"),
        ("redis://h/0?sweep_limit=lots", "sweep_limit", "a whole number"),
        ("redis://h/0?socket_keepalive=maybe", "socket_keepalive", "a boolean"),
        ("redis://h/0?db=first", "db", "a whole number"),
        ("amqp://h/?prefetch=1.5", "prefetch", "a whole number"),
        ("amqps://h/?verify=", "verify", "a boolean"),
        ("sqs://?create_queues=maybe", "create_queues", "a boolean"),
        ("sqs://?visibility_timeout=nan", "visibility_timeout", "a number"),
        ("kafka://b1?reinject=maybe", "reinject", "a boolean"),
        ("sb://ns?max_delivery_count=many", "max_delivery_count", "a whole number"),
        ("pulsar://h?ensure_subscription=maybe", "ensure_subscription", "a boolean"),
        ("pulsar://h?operation_timeout=inf", "operation_timeout", "a whole number"),
        ("artemis://h?admin_port=amqp", "admin_port", "a whole number"),
    ],
)
def test_a_bad_number_or_boolean_names_the_option_the_value_and_the_url(
    url: str, option: str, kind: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_transport(url)
    text = str(caught.value)
    assert text.startswith(f"{option}: not {kind}: "), text
    assert text.endswith(f" in {url}"), text


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"^prefetch: given more than once in the query"):
        open_transport("amqp://h/?prefetch=1&prefetch=2")
    with pytest.raises(ConfigurationError, match=r"\(as 'visibility_timeout' and 'retry_after'\)"):
        open_transport("redis://h/0?laravel=1&visibility_timeout=1&retry_after=2")


def test_an_object_option_is_a_keyword_not_a_url_option() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^client: an object, so a keyword option, not a URL option"
    ):
        open_transport("sqs://eu-west-1?client=boto3")


# -- per transport: documented options parse to their typed fields --------------------------------
DOCUMENTED = [
    ("memory://?visibility_timeout=2.5", {"visibility_timeout": 2.5}),
    (
        "sqlite:///q.db?visibility_timeout=5&busy_timeout=1&poll_interval=0.01&synchronous=full&create=false",
        {"visibility_timeout": 5.0, "busy_timeout": 1.0, "poll_interval": 0.01, "synchronous": "full",
         "create": False},
    ),
    (
        "redis://h/0?prefix=app:&visibility_timeout=7&poll_interval=0.2&sweep_limit=50&delays=lease",
        {"prefix": "app:", "visibility_timeout": 7.0, "poll_interval": 0.2, "sweep_limit": 50,
         "delays": "lease"},
    ),
    ("redis://h/0?laravel=1&retry_after=9", {"laravel": True, "visibility_timeout": 9.0}),
    ("redis://h/0?laravel_compat=yes", {"laravel_compat": True}),
    (
        "rediss://h/0?socket_timeout=5&socket_connect_timeout=2.5&ssl_cert_reqs=none&db=3&retry_on_timeout=true",
        {"socket_timeout": 5.0, "socket_connect_timeout": 2.5, "ssl_cert_reqs": "none", "db": 3,
         "retry_on_timeout": True},
    ),
    (
        "amqps://h/?prefetch=7&reserve_mode=get&max_priority=10&queue_type=quorum&confirm_timeout=5"
        "&heartbeat=30&frame_max=8192&channel_max=16&connection_attempts=3&retry_delay=0.5"
        "&socket_timeout=4&rpc_timeout=9&locale=de_DE&cafile=/ca.pem&certfile=/c.pem&keyfile=/k.pem"
        "&server_hostname=broker.test&verify=false",
        {"prefetch": 7, "reserve_mode": "get", "max_priority": 10, "queue_type": "quorum",
         "confirm_timeout": 5.0, "heartbeat": 30, "frame_max": 8192, "channel_max": 16,
         "connection_attempts": 3, "retry_delay": 0.5, "socket_timeout": 4.0, "rpc_timeout": 9.0,
         "locale": "de_DE", "cafile": "/ca.pem", "certfile": "/c.pem", "keyfile": "/k.pem",
         "server_hostname": "broker.test", "verify": False},
    ),
    (
        "sqs://?endpoint_url=http://127.0.0.1:4566&region=eu-west-1&visibility_timeout=30"
        "&create_queues=false&group_id=g&content_based_dedup=true&aws_access_key_id=AK"
        "&aws_secret_access_key=SK&aws_session_token=ST&profile=dev",
        {"endpoint_url": "http://127.0.0.1:4566", "region": "eu-west-1", "visibility_timeout": 30.0,
         "create_queues": False, "group_id": "g", "content_based_dedup": True, "aws_access_key_id": "AK",
         "aws_secret_access_key": "SK", "aws_session_token": "ST", "profile": "dev"},
    ),
    (
        "kafka://b1?group=g&retry_tiers=1000,5000&tier_policy=attempts&reinject=false&reinject_group=rg"
        "&delivery_timeout=5&auto_offset_reset=latest&assignment_strategy=range&client_id=app"
        "&security_protocol=SASL_SSL&sasl_mechanism=PLAIN&sasl_username=u&sasl_password=p&ssl_ca_location=/ca",
        {"group": "g", "retry_tiers": (1000, 5000), "tier_policy": "attempts", "reinject": False,
         "reinject_group": "rg", "delivery_timeout": 5.0, "auto_offset_reset": "latest",
         "assignment_strategy": "range", "client_id": "app", "security_protocol": "SASL_SSL",
         "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p", "ssl_ca_location": "/ca"},
    ),
    ("kafka://b1?retry_tiers=none", {"retry_tiers": ()}),
    (
        "sb://ns?connection_string=Endpoint%3Dsb://ns/&shared_access_key_name=n&shared_access_key=k"
        "&sas_token=t&visibility_timeout=20&create_queues=false&max_delivery_count=5",
        {"connection_string": "Endpoint=sb://ns/", "shared_access_key_name": "n", "shared_access_key": "k",
         "sas_token": "t", "visibility_timeout": 20.0, "create_queues": False, "max_delivery_count": 5},
    ),
    (
        "pulsar+ssl://h:6651?tenant=t&namespace=n&subscription=s&prefetch=500&nack_delay_ms=200"
        "&ack_timeout=15&ensure_subscription=false&confirm_empty=off&admin_url=https://h:8443"
        "&admin_timeout=3&token=jwt&tls_trust_certs=/ca&tls_allow_insecure=true&tls_validate_hostname=1"
        "&tls_cert=/c&tls_key=/k&operation_timeout=12",
        {"tenant": "t", "namespace": "n", "subscription": "s", "prefetch": 500, "nack_delay_ms": 200,
         "ack_timeout": 15.0, "ensure_subscription": False, "confirm_empty": False,
         "admin_url": "https://h:8443", "admin_timeout": 3.0, "token": "jwt", "tls_trust_certs": "/ca",
         "tls_allow_insecure": True, "tls_validate_hostname": True, "tls_cert": "/c", "tls_key": "/k",
         "operation_timeout": 12},
    ),
    (
        "artemis+ssl://h?broker=rabbitmq&address=/q/{queue}&release=released&delays=ignore&prefetch=7"
        "&heartbeat=0&timeout=3&confirm_timeout=4&linger=0.01&credit=prefetch&admin_port=5673&ca_file=/ca",
        {"broker": "rabbitmq", "address": "/q/{queue}", "release": "released", "delays": "ignore",
         "prefetch": 7, "heartbeat": 0.0, "timeout": 3.0, "confirm_timeout": 4.0, "linger": 0.01,
         "credit": "prefetch", "admin_port": 5673, "ca_file": "/ca"},
    ),
]  # fmt: skip

OPTIONS_OF_SCHEME = {
    "memory": MemoryOptions, "sqlite": SQLiteOptions, "redis": RedisOptions, "rediss": RedisOptions,
    "amqps": AMQPOptions, "sqs": SQSOptions, "kafka": KafkaOptions, "sb": ServiceBusOptions,
    "pulsar+ssl": PulsarOptions, "artemis+ssl": ArtemisOptions,
}  # fmt: skip


@pytest.mark.parametrize(("url", "expected"), DOCUMENTED, ids=lambda v: v if isinstance(v, str) else "")
def test_every_documented_option_parses_to_its_typed_field(url: str, expected: dict[str, Any]) -> None:
    link = TransportURL.split(url)
    parsed = OPTIONS_OF_SCHEME[link.scheme].parse(link)
    got = {name: getattr(parsed, name) for name in expected}
    assert got == expected
    assert all(type(got[name]) is type(value) for name, value in expected.items())


@pytest.mark.parametrize("cls", list(DOCUMENTED_IN), ids=lambda c: c.__name__)
def test_every_option_is_documented(cls: type[URLOptions]) -> None:
    text = "".join((DOCS / name).read_text(encoding="utf-8") for name in DOCUMENTED_IN[cls])
    missing = [name for name in cls.names() if f"`{name}`" not in text and f"`{name}=" not in text]
    assert missing == []


def _keywords(options: URLOptions) -> dict[str, Any]:
    """What ``from_url`` passes to the constructor (as in each transport's from_url)."""
    if isinstance(options, KafkaOptions):
        return options.constructor_options()
    if isinstance(options, AMQPOptions):
        return options.values(without=AMQPConnectionOptions.names())
    return options.values()


@pytest.mark.parametrize("cls", list(CONSTRUCTORS), ids=lambda c: c.__name__)
def test_options_are_constructor_keywords_with_the_same_defaults(cls: type[URLOptions]) -> None:
    """from_url splats the options into the constructor, which mypy cannot check: this does."""
    parameters = inspect.signature(CONSTRUCTORS[cls]).parameters
    passed = _keywords(cls())
    assert set(passed) - set(parameters) == set()
    differ = {
        name: (value, parameters[name].default)
        for name, value in passed.items()
        if value != parameters[name].default
    }
    assert differ == {}


def test_the_amqp_connection_options_are_the_connection_parameters() -> None:
    params = ConnectionParameters.from_url("amqp://h/")
    assert {name: getattr(params, name) for name in AMQPConnectionOptions.names()} == dataclasses.asdict(
        AMQPConnectionOptions()
    )


def test_redis_py_options_go_to_redis_py_as_written_and_ours_do_not() -> None:
    from babelq.transports.redis_options import client_url

    link = TransportURL.split("redis://:pw@h:6379/0?prefix=app:&socket_timeout=5&laravel=0&db=2")
    assert client_url(link, {"socket_connect_timeout": 1.5}) == (
        "redis://:pw@h:6379/0?socket_timeout=5&db=2&socket_connect_timeout=1.5"
    )
    assert set(CLIENT_OPTIONS) <= set(RedisOptions.names())


# -- precedence -------------------------------------------------------------------------------------
def test_a_keyword_wins_over_the_query_which_wins_over_the_rest_of_the_url() -> None:
    sqs = TransportURL.split("sqs://eu-west-1?region=us-east-2")
    assert SQSOptions.parse(sqs).region == "us-east-2"
    assert (
        SQSOptions.parse(sqs, {"region": "ap-south-1"}, implied={"region": "eu-west-1"}).region
        == "ap-south-1"
    )
    assert (
        SQSOptions.parse(TransportURL.split("sqs://"), implied={"region": "eu-west-1"}).region == "eu-west-1"
    )
    link = TransportURL.split("amqp://h/?prefetch=7")
    assert AMQPOptions.parse(link, {"prefetch": 9}).prefetch == 9
    # a query value is checked even where a keyword overrides it
    with pytest.raises(ConfigurationError, match=r"^prefetch: not a whole number"):
        AMQPOptions.parse(TransportURL.split("amqp://h/?prefetch=x"), {"prefetch": 9})


def test_transports_apply_the_precedence(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/q.db?visibility_timeout=5"
    with (
        SQLiteTransport.from_url(url, visibility_timeout=2) as keyword,
        SQLiteTransport.from_url(url) as query,
    ):
        assert (keyword.visibility_timeout, query.visibility_timeout) == (2.0, 5.0)
    amqp = AMQPTransport.from_url("amqp://guest:guest@h/?prefetch=7&heartbeat=30", heartbeat=5, prefetch=9)
    assert (amqp.prefetch, amqp._params.heartbeat) == (9, 5)  # a connection option as a keyword, too
    amqp.close()


def test_the_data_source_reader_defaults_give_way_to_the_url(tmp_path: Path) -> None:
    from babelq.spark.datasource.connect import reserving_options
    from babelq.spark.datasource.options import SourceOptions

    spelt = SourceOptions.parse({"url": f"sqlite://{tmp_path}/q.db?visibility_timeout=9", "queue": "q"})
    assert reserving_options(spelt, max_held=5, snapshot=False) == {"create": False}
    plain = SourceOptions.parse({"url": f"sqlite://{tmp_path}/q.db", "queue": "q"})
    assert reserving_options(plain, max_held=5, snapshot=False) == {
        "visibility_timeout": 60.0,
        "create": False,
    }
    amqp = SourceOptions.parse({"url": "amqp://h/?prefetch=3", "queue": "q"})
    assert reserving_options(amqp, max_held=500, snapshot=True) == {"reserve_mode": "get"}


# -- the seam ----------------------------------------------------------------------------------------
def test_transport_class_is_typed_and_from_url_is_part_of_the_protocol() -> None:
    from babelq.transports.base import Transport

    assert "from_url" in Transport.__dict__ and "holder_options" in Transport.__dict__
    for url in SCHEMES.values():
        assert callable(transport_class(url).from_url)


def test_parsing_options_imports_no_client_library() -> None:
    code = (
        "import sys, babelq.transports\n"
        "from babelq.transports.url_options import TransportURL\n"
        "from babelq.transports import memory, sqlite, redis, amqp, sqs, kafka, servicebus, pulsar, artemis\n"
        "from babelq.transports.redis_options import RedisOptions\n"
        "for cls, url in ((RedisOptions, 'redis://h?db=1'), (kafka.KafkaOptions, 'kafka://b?group=g'),\n"
        "                 (servicebus.ServiceBusOptions, 'sb://n?sas_token=t'), (pulsar.PulsarOptions, 'pulsar://h'),\n"
        "                 (artemis.ArtemisOptions, 'artemis://h'), (sqs.SQSOptions, 'sqs://r')):\n"
        "    cls.parse(TransportURL.split(url))\n"
        "libraries = ('redis', 'boto3', 'confluent_kafka', 'azure', 'pulsar', 'proton')\n"
        "print([name for name in libraries if name in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
