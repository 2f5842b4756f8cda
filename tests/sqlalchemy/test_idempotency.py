"""SQLAlchemyIdempotencyStore on SQLite and PostgreSQL: the contract, purge, shared transactions."""

from __future__ import annotations

import pytest

from tests.patterns.contract_idempotency import IdempotencyStoreContract
from tests.sqlalchemy.test_snapshots import Database, database  # noqa: F401 - fixture
from xsm_celery.sqlalchemy import SQLAlchemyIdempotencyStore, SQLAlchemyStore


class TestSQLAlchemyIdempotencyStore(IdempotencyStoreContract):
    """``SQLAlchemyIdempotencyStore`` keeps the idempotency store contract on both databases."""

    @pytest.fixture
    def store(self, database: Database) -> SQLAlchemyIdempotencyStore:  # noqa: F811
        """A store on a fresh private database (SQLite file or PostgreSQL schema)."""
        return SQLAlchemyIdempotencyStore(database())


def test_purge_drops_only_expired_rows(database: Database) -> None:  # noqa: F811
    """``purge_expired`` deletes expired claims and results and keeps live ones."""
    now = [1_000.0]
    store = SQLAlchemyIdempotencyStore(database(), clock=lambda: now[0])
    store.claim("old", "a", 10)
    store.claim("kept", "b", 10)
    store.complete("kept", "b", "r", None)
    now[0] += 20
    assert store.purge_expired() == 1
    assert store.claim("kept", "c", 10).result == "r"


def test_a_result_rolls_back_with_the_work(database: Database) -> None:  # noqa: F811
    """Completed inside a snapshot store's transaction that fails, the result is not kept."""
    snapshots = SQLAlchemyStore(database())
    store = SQLAlchemyIdempotencyStore(snapshots)
    store.claim("k", "a", 10)
    completed = []

    def failing_work() -> None:
        with snapshots.transaction():
            completed.append(store.complete("k", "a", "r", None))
            raise RuntimeError("the work failed after the result was written")

    with pytest.raises(RuntimeError):
        failing_work()
    assert completed == [True]
    assert store.claim("k", "b", 10).status == "in_progress"
