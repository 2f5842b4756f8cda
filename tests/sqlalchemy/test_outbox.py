"""SQLAlchemyOutboxStore: the outbox contract, shared transactions and concurrent claims."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from tests.eda.outbox_contract import FakeClock, OutboxStoreContract
from tests.sqlalchemy.test_snapshots import Database, database  # noqa: F401 - fixture
from xsm_celery.eda import Envelope
from xsm_celery.eda.outbox_protocols import OutboxStore
from xsm_celery.errors import StoreError
from xsm_celery.sqlalchemy.outbox import OUTBOX_TABLE, SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyStore


def _env(n: int) -> Envelope:
    return Envelope.new(type="order.paid", subject=f"o-{n}", data={"n": n})


class TestSQLAlchemyOutboxContract(OutboxStoreContract):
    """SQLAlchemyOutboxStore keeps the outbox contract on SQLite and PostgreSQL."""

    @pytest.fixture
    def outbox_factory(self, database: Database) -> Callable[[FakeClock], Any]:  # noqa: F811
        """Builds outboxes on the fresh database."""
        return lambda clock: SQLAlchemyOutboxStore(database(), clock=clock)


def test_outbox_satisfies_the_protocol(database: Database) -> None:  # noqa: F811
    """SQLAlchemyOutboxStore is an OutboxStore as eda.outbox_protocols defines it."""
    assert isinstance(SQLAlchemyOutboxStore(database()), OutboxStore)


def test_forced_rollback_after_the_write_leaves_no_row(database: Database) -> None:  # noqa: F811
    """Rows added inside the store's lock vanish with the snapshot when the block fails."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)

    def step() -> None:
        with store.lock("o-1"):
            store.save("o-1", '{"state": "paid"}')
            outbox.add("orders", _env(1))
            assert outbox.count() == 1
            raise RuntimeError("forced failure after the write")

    with pytest.raises(RuntimeError):
        step()
    assert outbox.count() == 0
    assert store.load("o-1") is None


def test_committed_block_keeps_snapshot_and_row_together(database: Database) -> None:  # noqa: F811
    """A block that succeeds commits the snapshot and its outbox rows at once."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    with store.lock("o-1"):
        store.save("o-1", "{}")
        outbox.add("orders", _env(1))
        outbox.add_many([("orders", _env(2)), ("audit", _env(3))])
    assert [r.topic for r in outbox.pending()] == ["orders", "orders", "audit"]
    assert store.load("o-1") is not None


def test_rows_are_invisible_to_others_until_commit(database: Database) -> None:  # noqa: F811
    """Another connection sees no outbox row before the snapshot's transaction commits."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    other = SQLAlchemyOutboxStore(database())
    seen: list[int] = []
    with store.lock("o-1"):
        outbox.add("orders", _env(1))
        reader = threading.Thread(target=lambda: seen.append(other.count()))
        reader.start()
        reader.join(10)
    assert seen == [0]
    assert other.count() == 1


def test_concurrent_claims_get_disjoint_rows(database: Database) -> None:  # noqa: F811
    """Several relays claiming at once never lease the same row twice."""
    outbox = SQLAlchemyOutboxStore(database())
    outbox.add_many([("orders", _env(i)) for i in range(200)])
    stores = [SQLAlchemyOutboxStore(database()) for _ in range(4)]
    claims: dict[str, list[int]] = {}
    barrier = threading.Barrier(4)

    def relay(owner: str, mine: SQLAlchemyOutboxStore) -> None:
        barrier.wait(10)
        got: list[int] = []
        while True:
            rows = mine.claim(17, owner, 30)
            if not rows:
                break
            got += [r.seq for r in rows]
            mine.mark_sent([r.seq for r in rows])
        claims[owner] = got

    threads = [threading.Thread(target=relay, args=(f"r{i}", stores[i])) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [seq for got in claims.values() for seq in got]
    assert len(every) == 200
    assert len(set(every)) == 200
    assert outbox.count(pending_only=True) == 0


def test_older_table_gains_the_lease_columns(database: Database) -> None:  # noqa: F811
    """Opening an outbox table made before leases adds claimed_by and claimed_until."""
    db = database()
    seq = "SERIAL PRIMARY KEY" if db.dialect == "postgresql" else "INTEGER PRIMARY KEY"
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {OUTBOX_TABLE} (seq {seq}, id VARCHAR(64) NOT NULL,"
                " topic VARCHAR(255) NOT NULL, subject VARCHAR(255), envelope TEXT NOT NULL,"
                " created_at FLOAT NOT NULL, sent_at FLOAT)"
            )
        )
    with pytest.raises(StoreError, match="claimed_by"):
        SQLAlchemyOutboxStore(db, create_table=False)
    outbox = SQLAlchemyOutboxStore(db)
    outbox.add("orders", _env(1))
    assert len(outbox.claim(5, "relay-a", 30)) == 1


def test_table_of_the_lease_version_gains_the_refusal_columns(
    database: Database,  # noqa: F811
) -> None:
    """A table made before refusals were counted keeps its rows and gains the columns."""
    db = database()
    seq = "SERIAL PRIMARY KEY" if db.dialect == "postgresql" else "INTEGER PRIMARY KEY"
    old = _env(1)
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {OUTBOX_TABLE} (seq {seq}, id VARCHAR(64) NOT NULL,"
                " topic VARCHAR(255) NOT NULL, subject VARCHAR(255), envelope TEXT NOT NULL,"
                " created_at FLOAT NOT NULL, sent_at FLOAT, claimed_by VARCHAR(128),"
                " claimed_until FLOAT)"
            )
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {OUTBOX_TABLE} (id, topic, subject, envelope, created_at)"
                " VALUES (:id, 'orders', :subject, :envelope, 1.0)"
            ),
            {"id": old.id, "subject": old.subject, "envelope": old.to_json()},
        )
    with pytest.raises(StoreError, match="attempts INTEGER NOT NULL DEFAULT 0"):
        SQLAlchemyOutboxStore(db, create_table=False)
    outbox = SQLAlchemyOutboxStore(db)
    assert outbox.count(pending_only=True) == 1
    [row] = outbox.claim(5, "relay-a", 30)
    assert row.envelope == old
    assert outbox.record_refusal(row.seq, "relay-a", "refused", max_attempts=2) == 1
    outbox.add("orders", _env(2))
    assert len(outbox.claim(5, "relay-a", 30)) == 2, "new rows get attempts 0 from the default"
    assert SQLAlchemyOutboxStore(db, create_table=False).count(pending_only=True) == 2


def test_add_refuses_a_non_envelope(database: Database) -> None:  # noqa: F811
    """add() takes Envelope objects only."""
    with pytest.raises(TypeError):
        SQLAlchemyOutboxStore(database()).add("orders", {"type": "x"})  # type: ignore[arg-type]
