"""SQLAlchemyTimerStore and SQLAlchemyAttemptMarkers on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import math
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence.protocols import TimerStore
from xsm_celery.sqlalchemy.timers import (
    MARKER_TABLE,
    TIMER_TABLE,
    SQLAlchemyAttemptMarkers,
    SQLAlchemyTimerStore,
    engine_for,
)


class FakeWall:
    """An epoch clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql", "pgbouncer"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL: a SQLite file, or the local PostgreSQL with empty tables.

    ``pgbouncer`` is PostgreSQL through PgBouncer in transaction pooling mode.
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'timers.db'}"
        return
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    url = request.getfixturevalue("postgres_url")
    engine = engine_for(url)
    SQLAlchemyTimerStore(engine)
    SQLAlchemyAttemptMarkers(engine, 60)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {TIMER_TABLE}"))
        conn.execute(sa.text(f"DELETE FROM {MARKER_TABLE}"))
    yield url


def test_store_satisfies_the_timer_protocol(db_url: str) -> None:
    """The SQL store is a TimerStore as persistence.protocols defines it."""
    assert isinstance(SQLAlchemyTimerStore(db_url), TimerStore)


def test_due_returns_only_due_timers_earliest_first(db_url: str) -> None:
    """due(now) lists timers whose due time has passed, in due order, with their payload."""
    store = SQLAlchemyTimerStore(db_url)
    late = store.schedule("task-b", 200.0, {"n": 2})
    early = store.schedule("task-a", 100.0, {"n": 1})
    store.schedule("task-c", 300.0, {"n": 3})
    due = store.due(250.0)
    assert [t.id for t in due] == [early, late]
    assert (due[0].key, due[0].payload, due[0].due_at) == ("task-a", {"n": 1}, 100.0)
    assert store.due(250.0, limit=1)[0].id == early


def test_claim_leases_rows_so_a_second_owner_skips_them(db_url: str) -> None:
    """A claimed timer is invisible to another owner until its lease ends."""
    store = SQLAlchemyTimerStore(db_url)
    timer = store.schedule("k", 10.0, {})
    assert [t.id for t in store.claim(20.0, 10, "beat-1", lease_s=30)] == [timer]
    assert store.claim(25.0, 10, "beat-2", lease_s=30) == []
    assert [t.id for t in store.claim(25.0, 10, "beat-1")] == [timer]
    assert [t.id for t in store.claim(56.0, 10, "beat-2")] == [timer]


def test_release_hands_a_lease_back_at_once(db_url: str) -> None:
    """release() frees only the caller's own leases."""
    store = SQLAlchemyTimerStore(db_url)
    timer = store.schedule("k", 10.0, {})
    store.claim(20.0, 10, "beat-1")
    assert store.release([timer], "beat-2") == 0
    assert store.release([timer], "beat-1") == 1
    assert [t.id for t in store.claim(21.0, 10, "beat-2")] == [timer]
    assert store.release([], "beat-2") == 0


def test_delete_and_delete_key(db_url: str) -> None:
    """delete() removes one timer, delete_key() every timer of a key."""
    store = SQLAlchemyTimerStore(db_url)
    one = store.schedule("a", 1.0, {})
    store.schedule("b", 1.0, {})
    store.schedule("b", 2.0, {})
    assert store.delete(one) is True
    assert store.delete(one) is False
    assert store.delete_key("b") == 2
    assert store.count() == 0


def test_timers_survive_a_new_store_object(db_url: str) -> None:
    """A timer written by one process is seen by a store opened later (durability)."""
    SQLAlchemyTimerStore(db_url).schedule("k", 5.0, {"task": "t"})
    engine_for.__globals__["_engines"].clear()
    assert [t.payload for t in SQLAlchemyTimerStore(db_url).due(5.0)] == [{"task": "t"}]


def test_concurrent_claims_never_hand_a_timer_to_two_owners(db_url: str) -> None:
    """Eight threads claiming the same 40 due rows get disjoint sets covering all of them."""
    store = SQLAlchemyTimerStore(db_url)
    ids = {store.schedule(f"k{i}", 1.0, {}) for i in range(40)}
    got: dict[str, list[str]] = {}
    barrier = threading.Barrier(8)

    def claim(owner: str) -> None:
        barrier.wait(timeout=10)
        got[owner] = [t.id for t in store.claim(2.0, 40, owner, lease_s=60)]

    threads = [threading.Thread(target=claim, args=(f"o{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    claimed = [timer for timers in got.values() for timer in timers]
    assert len(claimed) == len(set(claimed))
    assert set(claimed) == ids


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_times_are_refused(tmp_path: Path, bad: float) -> None:
    """A NaN or infinite due time would never fire (or always); it is a ValueError."""
    store = SQLAlchemyTimerStore(f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(ValueError, match="finite"):
        store.schedule("k", bad, {})
    with pytest.raises(ValueError, match="finite"):
        store.due(bad)


def test_negative_limit_is_refused(tmp_path: Path) -> None:
    """due(limit=-1) is a ValueError rather than 'no limit'."""
    store = SQLAlchemyTimerStore(f"sqlite:///{tmp_path / 't.db'}")
    with pytest.raises(ValueError, match="limit"):
        store.due(1.0, limit=-1)


def test_sqlite_file_is_created_owner_only(tmp_path: Path) -> None:
    """A SQLite file the store creates has mode 0600."""
    path = tmp_path / "fresh.db"
    SQLAlchemyTimerStore(f"sqlite:///{path}").schedule("k", 1.0, {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_unreachable_database_is_a_store_error() -> None:
    """A PostgreSQL URL that nothing listens on raises StoreUnavailableError, not a driver error."""
    with pytest.raises(StoreUnavailableError, match="unreachable"):
        SQLAlchemyTimerStore("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")


def test_markers_record_the_latest_attempt(db_url: str) -> None:
    """mark() overwrites the task's marker; started() reads it back."""
    markers = SQLAlchemyAttemptMarkers(db_url, ttl_s=60)
    assert markers.started("t1") is None
    markers.mark("t1", 1)
    markers.mark("t1", 2)
    assert markers.started("t1") == 2
    assert markers.started("t2") is None


def test_markers_expire_after_their_ttl(db_url: str) -> None:
    """An expired marker reads as None and purge_expired() deletes it."""
    wall = FakeWall()
    markers = SQLAlchemyAttemptMarkers(db_url, ttl_s=10, wall=wall)
    markers.mark("t1", 3)
    wall.now += 11
    assert markers.started("t1") is None
    assert markers.purge_expired() == 1
