"""The outbox in a SQLAlchemy transaction: a Session's commit publishes, its rollback does not."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Integer, String, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from babelq.envelope import make
from babelq.errors import ConfigurationError
from babelq.outbox import Outbox, Relay
from babelq.transports.memory import MemoryTransport

URN = "urn:babel:orders:created"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer: Mapped[str] = mapped_column(String(40))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.live)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(SQLAlchemy URL, the relay's URL, the outbox table)."""
    table = f"outbox_{uuid.uuid4().hex[:10]}"
    if request.param == "sqlite":
        path = tmp_path / "shop.db"
        yield f"sqlite:///{path}", f"sqlite:///{path}", table
        return
    from conftest import require_service

    require_service("postgres")
    url = "postgresql://postgres@127.0.0.1:5432/test"
    yield url.replace("postgresql://", "postgresql+psycopg://"), url, table
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        conn.execute(text("DROP TABLE IF EXISTS orders"))
    engine.dispose()


def relayed(relay_url: str, table: str) -> list[bytes]:
    transport = MemoryTransport()
    relay = Relay(relay_url, transport, table=table)
    try:
        relay.drain()
    finally:
        relay.close()
    return transport.peek_all("orders")


def test_a_session_commit_publishes_and_a_rollback_does_not(database: tuple[str, str, str]) -> None:
    sa_url, relay_url, table = database
    engine = create_engine(sa_url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    outbox = Outbox(table=table)
    with Session(engine) as session:
        outbox.init_schema(session)
        session.commit()
    kept = make(URN, {"order_id": 1}, queue="orders")
    dropped = make(URN, {"order_id": 2}, queue="orders")
    with Session(engine) as session, session.begin():
        session.add(Order(id=1, customer="ada"))
        row_id = outbox.add(session, kept)
        assert isinstance(row_id, int)
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        session.add(Order(id=2, customer="bob"))
        outbox.add(session, dropped)
        raise RuntimeError("the view failed")
    with Session(engine) as session:
        assert [o.id for o in session.query(Order).all()] == [1]
    engine.dispose()
    assert relayed(relay_url, table) == [kept.encode()]  # byte for byte, and only the committed one


def test_an_async_session_commit_publishes_and_a_rollback_does_not(database: tuple[str, str, str]) -> None:
    sa_url, relay_url, table = database
    if sa_url.startswith("sqlite"):
        pytest.importorskip("aiosqlite", reason="SQLite's asyncio driver is not installed")
    from sqlalchemy.ext.asyncio import AsyncSession

    outbox = Outbox(table=table)
    kept = make(URN, {"order_id": 3}, queue="orders")
    dropped = make(URN, {"order_id": 4}, queue="orders")

    async def main() -> None:
        engine = create_async_engine(sa_url.replace("sqlite://", "sqlite+aiosqlite://"))
        async with engine.begin() as conn:
            await conn.run_sync(outbox.init_schema)
        async with AsyncSession(engine) as session, session.begin():
            await outbox.add_async(session, kept)
        try:
            async with AsyncSession(engine) as session, session.begin():
                await outbox.add_async(session, dropped)
                raise RuntimeError("the endpoint failed")
        except RuntimeError:
            pass
        await engine.dispose()

    asyncio.run(main())
    assert relayed(relay_url, table) == [kept.encode()]


def test_an_autocommit_engine_is_refused(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/a.db", isolation_level="AUTOCOMMIT")
    outbox = Outbox()
    with Session(engine) as session:
        outbox.init_schema(session)
        with pytest.raises(ConfigurationError, match="AUTOCOMMIT"):
            outbox.add(session, make(URN, {}, queue="orders"))
    engine.dispose()
