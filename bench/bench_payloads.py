"""Typed payloads against the dict path: what converting ``data`` to a type costs per message.

    .venv/bin/python bench/bench_payloads.py [--n 20000] [--rounds 3]

Each round drains ``n`` messages from ``memory://`` through the App's whole consume path, once
per handler shape: a handler of the Message that reads ``data`` (the baseline), and handlers
asking for a dataclass, a TypedDict, a pydantic v2 model and a msgspec Struct. Prints the best
round's CPU-µs per message of each, its ratio to the baseline, and the extra µs the conversion
costs, beside the yardstick (seconds of a plain 10M-iteration Python loop in this process).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypedDict

from _util import yardstick

URN = "urn:babel:bench:order"
DATA = {"order_id": 1042, "amount_cents": 1500, "currency": "AUD", "note": "gift", "lines": [1, 2, 3]}


@dataclasses.dataclass
class OrderData:
    order_id: int
    amount_cents: int
    currency: str
    note: str | None
    lines: list[int]


class OrderDict(TypedDict):
    order_id: int
    amount_cents: int
    currency: str
    note: str | None
    lines: list[int]


def handlers() -> dict[str, Callable[..., None]]:
    import msgspec
    import pydantic

    from babelq.runtime import Message

    class OrderModel(pydantic.BaseModel):
        order_id: int
        amount_cents: int
        currency: str
        note: str | None
        lines: list[int]

    class OrderStruct(msgspec.Struct):
        order_id: int
        amount_cents: int
        currency: str
        note: str | None
        lines: list[int]

    seen: list[int] = []  # each handler reads a field, as a real one would

    def message(m: Message) -> None:
        seen.append(m.data["order_id"])

    def dataclass_(order: OrderData) -> None:
        seen.append(order.order_id)

    def typeddict(order: OrderDict) -> None:
        seen.append(order["order_id"])

    def model(order: Any) -> None:
        seen.append(order.order_id)

    def struct(order: Any) -> None:
        seen.append(order.order_id)

    model.__annotations__["order"] = OrderModel
    struct.__annotations__["order"] = OrderStruct
    return {"dict (Message)": message, "dataclass": dataclass_, "TypedDict": typeddict,
            "pydantic": model, "msgspec": struct}  # fmt: skip


def drain(handler: Callable[..., None], n: int) -> float:
    """Seconds per message of one drain of ``n`` messages."""
    from babelq.envelope import make
    from babelq.runtime import App
    from babelq.transports.memory import MemoryTransport

    transport = MemoryTransport()
    bodies = [make(URN, DATA, queue="q").encode() for _ in range(n)]
    for body in bodies:
        transport.publish("q", body)
    app = App(transport, queue="q", prefetch=256)
    app.register(URN, handler)
    started = time.process_time()  # CPU of this process: steadier than the wall on a busy machine
    assert app.run_until_empty() == n
    return (time.process_time() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"yardstick (10M-iteration loop): {yardstick():.3f} s")
    shapes = handlers()
    best = {name: float("inf") for name in shapes}
    for handler in shapes.values():  # warm-up
        drain(handler, 1_000)
    for _ in range(args.rounds):
        for name, handler in shapes.items():
            best[name] = min(best[name], drain(handler, args.n))
    base = best["dict (Message)"]
    print(f"memory://, {args.n} messages a round, best of {args.rounds} alternated rounds")
    for name, seconds in best.items():
        extra = (seconds - base) * 1e6
        print(f"  {name:15s} {seconds * 1e6:7.2f} CPU-µs/msg  {seconds / base:5.2f}x  ({extra:+6.2f} µs)")


if __name__ == "__main__":
    main()
