"""MemoryStore and SQLiteStore keep the snapshot store contract; SQLite specifics."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests.persistence.store_contract import StateStoreContract
from xsm_celery.errors import StoreError, StoreUnavailableError
from xsm_celery.persistence import MemoryStore, SQLiteDatabase, SQLiteStore, StateStore


class TestMemoryStoreContract(StateStoreContract):
    """MemoryStore runs the store contract."""

    @pytest.fixture
    def store(self) -> MemoryStore:
        """A fresh memory store."""
        return MemoryStore()


class TestSQLiteStoreContract(StateStoreContract):
    """SQLiteStore runs the store contract."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> SQLiteStore:
        """A fresh SQLite store in a temporary file."""
        return SQLiteStore(tmp_path / "state.db")


def test_stores_satisfy_the_protocol(tmp_path: Path) -> None:
    """Both stores are StateStores."""
    assert isinstance(MemoryStore(), StateStore)
    assert isinstance(SQLiteStore(tmp_path / "s.db"), StateStore)


def test_sqlite_file_is_private(tmp_path: Path) -> None:
    """The database file is created mode 0600."""
    SQLiteStore(tmp_path / "s.db")
    assert stat.S_IMODE(os.stat(tmp_path / "s.db").st_mode) == 0o600


def test_sqlite_lock_rolls_back_on_error(tmp_path: Path) -> None:
    """An exception inside lock() undoes every write made in it."""
    store = SQLiteStore(tmp_path / "s.db")
    store.save("k", '"before"')

    def write_then_fail() -> None:
        with store.lock("k"):
            store.save("k", '"after"')
            raise RuntimeError("forced")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert store.load("k").snapshot == '"before"'


def test_nested_transaction_is_a_savepoint(tmp_path: Path) -> None:
    """An inner failing transaction undoes only its own writes."""
    store = SQLiteStore(tmp_path / "s.db")

    def inner_fails() -> None:
        with store.transaction():
            store.save("b", "2")
            raise RuntimeError("inner")

    with store.lock("a"):
        store.save("a", "1")
        with pytest.raises(RuntimeError):
            inner_fails()
    assert store.load("a") is not None
    assert store.load("b") is None


def test_a_driver_error_in_a_transaction_is_a_store_error(tmp_path: Path) -> None:
    """A refused value inside a block is StoreError (not an outage), and the block rolls back."""
    db = SQLiteDatabase(tmp_path / "d.db")
    db.script("CREATE TABLE t (n INTEGER NOT NULL)")

    def fill(values: list[int | None], table: str = "t") -> None:
        with db.transaction(what=f"filling {table}") as conn:
            for value in values:
                conn.execute(f"INSERT INTO {table} (n) VALUES (?)", (value,))

    with pytest.raises(StoreError, match="SQLite filling t failed") as caught:
        fill([1, None])
    assert not isinstance(caught.value, StoreUnavailableError)
    assert db.query("SELECT COUNT(*) FROM t") == [(0,)]
    with pytest.raises(StoreUnavailableError, match="filling missing"):
        fill([1], table="missing")


def test_two_connections_see_each_other(tmp_path: Path) -> None:
    """Two stores on one file (two processes' view) read each other's commits."""
    a, b = SQLiteStore(tmp_path / "s.db"), SQLiteStore(tmp_path / "s.db")
    a.save("k", "1")
    assert b.load("k").version == 1
    assert b.save("k", "2", expected_version=1) == 2


def test_threads_saving_concurrently_lose_nothing(tmp_path: Path) -> None:
    """Concurrent unconditional saves from threads all land, versions counting each."""
    store = SQLiteStore(tmp_path / "s.db")

    def work() -> None:
        for _ in range(25):
            store.save("k", "{}")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.load("k").version == 100


def test_unopenable_database_is_a_store_error(tmp_path: Path) -> None:
    """A path SQLite cannot open raises StoreError naming it."""
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match=r"dir\.db"):
        SQLiteDatabase(tmp_path / "dir.db")


def test_memory_database(tmp_path: Path) -> None:
    """':memory:' works for throwaway stores."""
    store = SQLiteStore(":memory:")
    store.save("k", "{}")
    assert store.load("k").version == 1


def test_memory_transaction_takes_saves_back_on_error() -> None:
    """A MemoryStore save inside a failing transaction() is undone; nested ones too."""
    store = MemoryStore()
    store.save("k", '"v1"')

    def fail() -> None:
        with store.transaction():
            store.save("k", '"v2"')
            with store.transaction():
                store.save("new", "{}")
            raise RuntimeError("forced")

    with pytest.raises(RuntimeError):
        fail()
    assert store.load("k").snapshot == '"v1"'
    assert store.load("new") is None
    with store.transaction():
        store.save("k", '"v3"')
    assert store.load("k").version == 2
