"""Typed payloads: handlers ask for data as a model; data that does not fit is dead-lettered at once."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import msgspec
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.runtime import App, Message, current_message
from babelq.runtime.payloads import PayloadError, converter

from .support import RecordingTransport, dlq_envelopes

URN = "urn:babel:orders:created"


class OrderModel(pydantic.BaseModel):
    order_id: int
    amount_cents: int = pydantic.Field(ge=0)
    currency: str


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int


@dataclasses.dataclass
class OrderData:
    order_id: int
    currency: Literal["AUD", "EUR"]
    lines: list[Line]
    note: str | None = None
    weight: float = 0.0


class OrderDict(TypedDict):
    order_id: int
    currency: str


class OrderStruct(msgspec.Struct):
    order_id: int
    currency: str


def run(
    make_app: Callable[..., App], transport: RecordingTransport, handler: Any, bodies: list[dict[str, Any]]
) -> App:
    app = make_app(max_attempts=3)
    app.register(URN, handler)
    for data in bodies:
        transport.publish("q", make(URN, data, queue="q").encode())
    app.run_until_empty(wait_delayed=True, timeout=10)
    return app


def test_a_pydantic_handler_gets_the_model_and_bad_data_names_every_path(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    got: list[OrderModel] = []

    def created(order: OrderModel) -> None:
        message = current_message()
        assert message is not None and message.urn == URN  # the message is still at hand
        got.append(order)

    app = run(make_app, transport, created, [
        {"order_id": 1, "amount_cents": 1500, "currency": "AUD"},
        {"order_id": "x", "amount_cents": -5, "currency": "AUD"},
    ])
    assert got == [OrderModel(order_id=1, amount_cents=1500, currency="AUD")]
    (dead,) = dlq_envelopes(transport)
    assert dead.dead_letter is not None
    assert dead.dead_letter["cause"] == "schema" and dead.dead_letter["attempts"] == 0  # never retried
    error = dead.dead_letter["error"]
    assert error.startswith("schema: ") and "$.order_id" in error and "$.amount_cents" in error
    assert "OrderModel" in error and dead.dead_letter["exception"] == "babelq.errors.PayloadError"
    assert app.stats()["schema_invalid"] == 1


def test_a_dataclass_handler_gets_nested_dataclasses_and_every_bad_path(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    got: list[OrderData] = []
    good = {"order_id": 7, "currency": "EUR", "lines": [{"sku": "A", "quantity": 2}], "extra": "ignored"}
    bad = {"order_id": True, "currency": "USD", "lines": [{"sku": "A"}, {"sku": 3, "quantity": 1}]}
    run(make_app, transport, got.append, [])  # a plain callable without annotations takes messages
    transport.purge("q")

    def created(order: OrderData) -> None:
        got.append(order)

    got.clear()
    run(make_app, transport, created, [good, bad])
    assert got == [OrderData(7, "EUR", [Line("A", 2)])]
    (dead,) = dlq_envelopes(transport)
    assert dead.dead_letter is not None
    error = dead.dead_letter["error"]
    for path in ("$.order_id", "$.currency", "$.lines[0].quantity", "$.lines[1].sku"):
        assert path in error or "more)" in error, path
    with pytest.raises(PayloadError) as caught:
        converter(OrderData)(bad)
    assert [e.split(":")[0] for e in caught.value.errors] == [
        "$.order_id", "$.currency", "$.lines[0].quantity", "$.lines[1].sku"
    ]


def test_typeddict_and_msgspec_handlers(transport: RecordingTransport, make_app: Callable[..., App]) -> None:
    dicts: list[OrderDict] = []
    structs: list[OrderStruct] = []

    def as_dict(order: OrderDict) -> None:
        dicts.append(order)

    async def as_struct(order: OrderStruct) -> None:
        await asyncio.sleep(0)
        structs.append(order)

    app = make_app()
    app.register(URN, as_dict)
    app.register("urn:babel:orders:paid", as_struct)
    for urn, data in [
        (URN, {"order_id": 1, "currency": "AUD"}),
        (URN, {"order_id": 2}),
        ("urn:babel:orders:paid", {"order_id": 3, "currency": "EUR"}),
        ("urn:babel:orders:paid", {"order_id": "3", "currency": "EUR"}),
    ]:
        transport.publish("q", make(urn, data, queue="q").encode())
    app.run_until_empty()
    app.close()
    assert dicts == [{"order_id": 1, "currency": "AUD"}]
    assert structs == [OrderStruct(order_id=3, currency="EUR")]
    errors = sorted(e.dead_letter["error"] for e in dlq_envelopes(transport) if e.dead_letter)
    assert len(errors) == 2
    assert any("$.currency: is required" in e for e in errors)
    assert any("$.order_id" in e and "OrderStruct" in e for e in errors)


@dataclasses.dataclass
class WithDate:
    at: datetime.datetime


def test_payload_types_that_cannot_be_checked_are_refused_at_registration() -> None:
    def dated(event: WithDate) -> None: ...

    app = App("memory://", queue="q")
    with pytest.raises(ConfigurationError, match="datetime"):
        app.register(URN, dated)
    assert app.router.urns == ()


def test_an_annotation_that_cannot_be_resolved_is_refused_not_guessed() -> None:
    namespace: dict[str, Any] = {}
    exec(
        "from __future__ import annotations\n"
        "def created(order: LocalOrder) -> None: ...\n",
        namespace,
    )
    app = App("memory://", queue="q")
    with pytest.raises(ConfigurationError) as caught:
        app.register(URN, namespace["created"])
    assert "LocalOrder" in str(caught.value) and "\n" not in str(caught.value)


def test_message_annotations_still_get_the_message(
    transport: RecordingTransport, make_app: Callable[..., App]
) -> None:
    seen: list[object] = []

    def plain(message: Message) -> None:
        seen.append(message)

    run(make_app, transport, plain, [{"order_id": 1}])
    assert isinstance(seen[0], Message)


@pytest.mark.parametrize(
    "typed",
    [
        OrderModel(order_id=1, amount_cents=1500, currency="AUD"),
        OrderStruct(order_id=1, currency="AUD"),
        OrderData(1, "AUD", [Line("A", 2)], note="é"),
    ],
    ids=["pydantic", "msgspec", "dataclass"],
)
def test_publishing_a_typed_object_writes_the_bytes_of_its_dict(typed: Any) -> None:
    fixed = {"message_id": "m-1", "trace_id": "t-1", "created_at": 1_700_000_000_000}
    if isinstance(typed, pydantic.BaseModel):
        as_dict = typed.model_dump(mode="json")
    elif isinstance(typed, msgspec.Struct):
        as_dict = msgspec.to_builtins(typed)
    else:
        as_dict = dataclasses.asdict(typed)
    assert make(URN, typed, **fixed).encode() == make(URN, as_dict, **fixed).encode()
    transport = RecordingTransport()
    App(transport, queue="q").publish(URN, typed)
    (body,) = transport.peek_all("q")
    assert b'"order_id":1' in body


# -- the checker as a parser: valid values round-trip, one broken field is named -----------------

lines = st.builds(Line, sku=st.text(max_size=5), quantity=st.integers(-(2**40), 2**40))
orders = st.builds(
    OrderData,
    order_id=st.integers(-(2**62), 2**62),
    currency=st.sampled_from(["AUD", "EUR"]),
    lines=st.lists(lines, max_size=4),
    note=st.none() | st.text(max_size=8),
    weight=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-1000, 1000),
)
wrong = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.lists(st.integers(), max_size=2))


@given(orders)
def test_every_valid_value_round_trips(order: OrderData) -> None:
    data = dataclasses.asdict(order)
    back = converter(OrderData)(data)
    assert back == dataclasses.replace(order, weight=float(order.weight))


@given(orders, st.sampled_from(["order_id", "currency", "lines"]), wrong)
def test_one_broken_field_is_named(order: OrderData, field: str, value: Any) -> None:
    data = dataclasses.asdict(order)
    data[field] = value
    ok = (field == "lines" and value == []) or (field == "currency" and value in ("AUD", "EUR"))
    if ok:
        converter(OrderData)(data)
        return
    with pytest.raises(PayloadError) as caught:
        converter(OrderData)(data)
    assert any(e.startswith(f"$.{field}") for e in caught.value.errors)


# -- the type's JSON Schema as the URN's schema ----------------------------------------------------


@dataclasses.dataclass
class Shipment:
    order: OrderData
    carrier: Literal["dhl", "ups"] | None = None


@pytest.mark.parametrize("tp", [OrderModel, OrderStruct, OrderData, OrderDict, Shipment])
def test_a_types_schema_is_registered_in_the_subset_and_agrees_with_the_type(tp: Any) -> None:
    from babelq.schema import SchemaRegistry
    from babelq.schema.subset import check_schema

    registry = SchemaRegistry()
    schema = registry.register_type(URN, tp)
    check_schema(schema)  # what the Spark check and the quick check compile
    samples: list[dict[str, Any]] = [
        {"order_id": 1, "amount_cents": 5, "currency": "AUD"},
        {"order_id": 1, "amount_cents": -5, "currency": "AUD"},
        {"order_id": "1", "currency": "AUD"},
        {"order_id": 1, "currency": "EUR", "lines": [{"sku": "a", "quantity": 1}]},
        {"order_id": 1, "currency": "EUR", "lines": [{"sku": "a"}]},
        {"order": {"order_id": 1, "currency": "EUR", "lines": []}, "carrier": None},
        {"order": {"order_id": 1, "currency": "EUR", "lines": []}, "carrier": "fedex"},
        {"order": {"order_id": 1, "currency": "EUR", "lines": []}, "carrier": "dhl"},
    ]
    convert = converter(tp)
    for data in samples:
        try:
            convert(data)
            fits = True
        except PayloadError:
            fits = False
        assert registry.is_valid(URN, data) == fits, (tp, data)
