"""``make_engine`` on PostgreSQL: a pooled connection is pinged only after sitting idle.

The engine skips SQLAlchemy's ping-per-checkout (one round trip per transaction) and pings a
connection only when it went back to the pool ``PING_IDLE_S`` or more ago. These tests kill
the server side of a pooled connection with ``pg_terminate_backend`` and check both halves:
an idle dead connection is replaced without an error, and one reused at once fails as an
outage (``StoreUnavailableError``), after which the store works again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests import services
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.sqlalchemy import connect
from xsm_celery.sqlalchemy.connect import make_engine
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyStore


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    services.require("postgres")
    made = make_engine(services.POSTGRES_URL, pool_size=1, max_overflow=0)
    yield made
    made.dispose()


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pid: int) -> None:
    admin = sa.create_engine(connect.normalize_url(services.POSTGRES_URL))
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()
    time.sleep(0.1)  # the backend is gone once the signal is handled


def _pings(engine: sa.Engine) -> list[float]:
    """Record every ping the dialect sends on ``engine``."""
    seen: list[float] = []
    original = engine.dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        seen.append(time.monotonic())
        return bool(original(dbapi_connection))

    engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return seen


def test_a_connection_back_in_use_at_once_is_not_pinged(engine: sa.Engine) -> None:
    pings = _pings(engine)
    first = _backend_pid(engine)
    assert [_backend_pid(engine) for _ in range(5)] == [first] * 5
    assert pings == []


def test_an_idle_dead_connection_is_replaced_without_an_error(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect, "PING_IDLE_S", 0.05)
    pings = _pings(engine)
    first = _backend_pid(engine)
    _terminate(first)
    second = _backend_pid(engine)  # idle > 0.05 s: pinged, found dead, replaced
    assert second != first
    assert len(pings) == 1


def test_a_dead_connection_reused_at_once_is_an_outage_then_the_store_recovers(
    engine: sa.Engine,
) -> None:
    store = SQLAlchemyStore(engine)
    key = f"ping-{time.monotonic_ns()}"
    store.save(key, "{}")
    pid = _backend_pid(engine)
    _terminate(pid)
    with pytest.raises(StoreUnavailableError):
        store.load(key)  # used within PING_IDLE_S: no ping, the disconnect surfaces
    record = store.load(key)  # the pool was dropped; a fresh connection answers
    assert record is not None
    pid = _backend_pid(engine)
    _terminate(pid)
    with pytest.raises(StoreUnavailableError):
        store.save(key, '{"n": 1}')  # a write in a transaction: the same outage
    store.save(key, '{"n": 2}')
    saved = store.load(key)
    assert saved is not None
    assert saved.snapshot == '{"n": 2}'
    store.delete(key)


def test_asking_for_pool_pre_ping_keeps_a_ping_per_checkout() -> None:
    services.require("postgres")
    made = make_engine(services.POSTGRES_URL, pool_pre_ping=True, pool_size=1, max_overflow=0)
    try:
        pings = _pings(made)
        for _ in range(5):
            _backend_pid(made)
        assert len(pings) >= 4  # every checkout of a pooled connection
    finally:
        made.dispose()
