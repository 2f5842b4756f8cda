"""MemoryOutboxStore and SQLiteOutboxStore keep the outbox contract; SQLite specifics."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.eda.outbox_contract import FakeClock, OutboxStoreContract
from xsm_celery.eda import Envelope, MemoryOutboxStore, SQLiteOutboxStore
from xsm_celery.persistence import SQLiteStore


class TestMemoryOutboxContract(OutboxStoreContract):
    """MemoryOutboxStore runs the outbox contract."""

    @pytest.fixture
    def outbox_factory(self) -> Callable[[FakeClock], Any]:
        """Builds memory outboxes."""
        return lambda clock: MemoryOutboxStore(clock=clock)


class TestSQLiteOutboxContract(OutboxStoreContract):
    """SQLiteOutboxStore runs the outbox contract."""

    @pytest.fixture
    def outbox_factory(self, tmp_path: Path) -> Callable[[FakeClock], Any]:
        """Builds SQLite outboxes in a temporary file."""
        return lambda clock: SQLiteOutboxStore(tmp_path / "outbox.db", clock=clock)


def test_sqlite_outbox_file_is_private(tmp_path: Path) -> None:
    """The database file an outbox creates is mode 0600."""
    SQLiteOutboxStore(tmp_path / "o.db")
    assert stat.S_IMODE(os.stat(tmp_path / "o.db").st_mode) == 0o600


def test_sqlite_outbox_uses_wal(tmp_path: Path) -> None:
    """The outbox database runs in WAL mode."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    assert outbox.db.query("PRAGMA journal_mode")[0][0] == "wal"


def test_old_table_gains_the_lease_columns(tmp_path: Path) -> None:
    """Opening an outbox table made without leases adds claimed_by and claimed_until."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE xsm_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, "
        "topic TEXT NOT NULL, subject TEXT, envelope TEXT NOT NULL, created_at REAL NOT NULL, "
        "sent_at REAL)"
    )
    conn.commit()
    conn.close()
    outbox = SQLiteOutboxStore(path)
    assert {"claimed_by", "claimed_until"} <= outbox.db.columns("xsm_outbox")
    outbox.add("t", Envelope.new(type="x"))
    assert len(outbox.claim(1, "a", 30)) == 1


def test_table_of_the_lease_version_gains_the_refusal_columns(tmp_path: Path) -> None:
    """A database made before refusals were counted keeps its rows and gains the columns."""
    path = tmp_path / "leases.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE xsm_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, "
        "topic TEXT NOT NULL, subject TEXT, envelope TEXT NOT NULL, created_at REAL NOT NULL, "
        "sent_at REAL, claimed_by VARCHAR(128), claimed_until REAL)"
    )
    old = Envelope.new(type="x", subject="s", data={"n": 1})
    conn.execute(
        "INSERT INTO xsm_outbox (id, topic, subject, envelope, created_at) VALUES (?, ?, ?, ?, ?)",
        (old.id, "t", old.subject, old.to_json(), 1.0),
    )
    conn.commit()
    conn.close()
    outbox = SQLiteOutboxStore(path)
    assert {"attempts", "last_error", "failed_at"} <= outbox.db.columns("xsm_outbox")
    assert outbox.count(pending_only=True) == 1
    [row] = outbox.claim(5, "relay-a", 30)
    assert row.envelope == old
    assert outbox.record_refusal(row.seq, "relay-a", "refused", max_attempts=1) == 1
    assert [f.envelope for f in outbox.failed()] == [old]
    assert SQLiteOutboxStore(path).count(failed_only=True) == 1, "opening again changes nothing"


def test_outbox_shares_the_snapshot_transaction(tmp_path: Path) -> None:
    """A row added inside the store's lock is rolled back with the snapshot."""
    store = SQLiteStore(tmp_path / "state.db")
    outbox = SQLiteOutboxStore(store)

    def write_then_fail() -> None:
        with store.lock("o-1"):
            store.save("o-1", "{}")
            outbox.add("t", Envelope.new(type="x"))
            raise RuntimeError("forced failure after the write")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert outbox.count() == 0
    assert store.load("o-1") is None


def test_two_processes_worth_of_connections_never_share_rows(tmp_path: Path) -> None:
    """Two stores on one file (two relays' connections) never claim the same row."""
    path = tmp_path / "o.db"
    a, b = SQLiteOutboxStore(path), SQLiteOutboxStore(path)
    for n in range(20):
        a.add("t", Envelope.new(type="x", subject=str(n)))
    got_a = a.claim(7, "a", 30)
    got_b = b.claim(100, "b", 30)
    assert len(got_a) + len(got_b) == 20
    assert {r.seq for r in got_a}.isdisjoint({r.seq for r in got_b})
