"""SQLAlchemyStore on a SQLite file and on PostgreSQL: versions, conflicts, locks, sharing.

The ``database`` fixture defined here is shared by the outbox and inbox tests: a fresh
SQLite file, or a private PostgreSQL schema dropped afterwards, so the tables of this
area never meet those of another area's tests in the shared ``test`` database.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.persistence.store_contract import StateStoreContract
from xsm_celery.errors import ConflictError, LockTimeoutError, StoreError
from xsm_celery.sqlalchemy.connect import make_engine
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyDatabase, SQLAlchemyStore, advisory_key

Database = Callable[[], SQLAlchemyDatabase]


@pytest.fixture(params=["sqlite", "postgresql", "pgbouncer"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A factory of ``SQLAlchemyDatabase`` objects on one fresh, private database.

    ``pgbouncer`` is PostgreSQL through PgBouncer in transaction pooling mode.
    """
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'stores.db'}"
        yield lambda: SQLAlchemyDatabase(url)
        return
    if request.param == "pgbouncer":
        pooled: str = request.getfixturevalue("pgbouncer_url")
        pooled_engines: list[Engine] = []

        def pooled_factory() -> SQLAlchemyDatabase:
            pooled_engines.append(make_engine(pooled))
            return SQLAlchemyDatabase(pooled_engines[-1])

        yield pooled_factory
        for engine in pooled_engines:
            engine.dispose()
        return
    url = request.getfixturevalue("postgres_url")
    schema = f"xsm_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engines: list[Engine] = []

    def factory() -> SQLAlchemyDatabase:
        engine = make_engine(url, connect_args={"options": f"-csearch_path={schema}"})
        engines.append(engine)
        return SQLAlchemyDatabase(engine)

    yield factory
    for engine in engines:
        engine.dispose()
    with admin.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def store(database: Database) -> SQLAlchemyStore:
    """A snapshot store on the fresh database."""
    return SQLAlchemyStore(database())


class TestSQLAlchemyStoreContract(StateStoreContract):
    """SQLAlchemyStore keeps the snapshot store contract on SQLite and PostgreSQL."""


def test_save_and_load_round_trip_with_growing_versions(store: SQLAlchemyStore) -> None:
    """Each save returns the next version; load returns the last snapshot and its metadata."""
    assert store.load("o-1") is None
    assert store.save("o-1", '{"v": 1}', machine_version="1.0") == 1
    assert store.save("o-1", '{"v": 2}', machine_version="1.1") == 2
    record = store.load("o-1")
    assert record is not None
    assert (record.key, record.snapshot, record.version) == ("o-1", '{"v": 2}', 2)
    assert record.machine_version == "1.1"
    assert abs(record.updated_at - time.time()) < 60


def test_expected_version_refuses_a_stale_writer(store: SQLAlchemyStore) -> None:
    """A save over another version raises ConflictError and writes nothing."""
    store.save("o-1", "a")
    with pytest.raises(ConflictError):
        store.save("o-1", "b", expected_version=5)
    with pytest.raises(ConflictError):
        store.save("o-1", "b", expected_version=0)
    assert store.save("o-1", "c", expected_version=1) == 2
    loaded = store.load("o-1")
    assert loaded is not None
    assert loaded.snapshot == "c"


def test_expected_version_zero_creates_only_new_keys(store: SQLAlchemyStore) -> None:
    """expected_version=0 means the key must not exist yet."""
    assert store.save("new", "x", expected_version=0) == 1


def test_bad_keys_and_oversized_snapshots_are_refused(database: Database) -> None:
    """Keys and sizes follow the rules every snapshot store shares."""
    store = SQLAlchemyStore(database(), max_bytes=10)
    for key in ("", "x" * 201, "a\x00b"):
        with pytest.raises(StoreError):
            store.save(key, "{}")
    with pytest.raises(StoreError):
        store.save("k", "x" * 11)


def test_delete_and_list_keys(store: SQLAlchemyStore) -> None:
    """list_keys filters by a literal prefix, sorted and limited; delete says if it existed."""
    for key in ("order:2", "order:1", "order_x", "pay:1"):
        store.save(key, "{}")
    assert store.list_keys(prefix="order:") == ["order:1", "order:2"]
    assert store.list_keys(prefix="order_") == ["order_x"]
    assert store.list_keys(limit=2) == ["order:1", "order:2"]
    assert store.delete("order:1") is True
    assert store.delete("order:1") is False
    assert store.list_keys(prefix="order") == ["order:2", "order_x"]


def test_a_failing_lock_block_rolls_the_save_back(store: SQLAlchemyStore) -> None:
    """An exception leaving lock() undoes every write made inside it."""
    store.save("o-1", "before")

    def step() -> None:
        with store.lock("o-1"):
            store.save("o-1", "inside")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        step()
    loaded = store.load("o-1")
    assert loaded is not None
    assert (loaded.snapshot, loaded.version) == ("before", 1)


def test_reads_inside_a_lock_see_its_own_writes(store: SQLAlchemyStore) -> None:
    """load() inside lock() runs on the transaction's connection."""
    with store.lock("o-1"):
        store.save("o-1", "mine")
        loaded = store.load("o-1")
        assert loaded is not None
        assert loaded.snapshot == "mine"


def test_nested_transaction_failure_undoes_only_its_writes(store: SQLAlchemyStore) -> None:
    """A failing inner transaction is a savepoint: the outer block's writes survive."""
    with store.lock("o-1"):
        store.save("o-1", "outer")

        def inner() -> None:
            with store.transaction():
                store.save("o-2", "inner")
                raise RuntimeError("inner fails")

        with pytest.raises(RuntimeError):
            inner()
    assert store.load("o-2") is None
    loaded = store.load("o-1")
    assert loaded is not None
    assert loaded.snapshot == "outer"


def test_lock_serialises_writers_of_one_key(database: Database) -> None:
    """Two threads holding lock(key) never overlap; a blocked one times out."""
    first, second = SQLAlchemyStore(database()), SQLAlchemyStore(database())
    entered = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with first.lock("o-1"):
            entered.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(10)
        started = time.monotonic()
        with pytest.raises(LockTimeoutError), second.lock("o-1", timeout=0.3):
            pass
        assert time.monotonic() - started < 20
    finally:
        leave.set()
        holder.join(10)
    with second.lock("o-1", timeout=5):
        second.save("o-1", "after")


def test_postgres_locks_other_keys_independently(database: Database) -> None:
    """On PostgreSQL lock(key) is per key: another key is free while one is held."""
    db = database()
    if db.dialect != "postgresql":
        pytest.skip("SQLite's write lock is database-wide by design")
    first, second = SQLAlchemyStore(db), SQLAlchemyStore(database())
    with first.lock("o-1"), second.lock("o-2", timeout=1):
        second.save("o-2", "free")


def test_advisory_key_is_stable_across_processes_and_signed_64_bit() -> None:
    """Two interpreters with different hash seeds compute the same lock id as this one.

    Workers lock each other out only if they agree on the number, so it is computed in
    fresh processes with PYTHONHASHSEED set apart: a key built on ``hash()`` would differ.
    """
    keys = ["o-1", "o-2", "x" * 200, "\u00e9t\u00e9"]
    code = (
        "import json, sys; from xsm_celery.sqlalchemy.snapshots import advisory_key; "
        "print(json.dumps([advisory_key(k) for k in json.loads(sys.argv[1])]))"
    )
    seen = []
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(keys)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        seen.append(json.loads(out.stdout))
    here = [advisory_key(k) for k in keys]
    assert seen == [here, here]
    assert len(set(here)) == len(keys)
    assert all(-(2**63) <= value < 2**63 for value in here)


def test_sqlite_file_is_private(tmp_path: Path) -> None:
    """A SQLite file the store creates is mode 0600."""
    SQLAlchemyStore(f"sqlite:///{tmp_path / 's.db'}")
    assert stat.S_IMODE(os.stat(tmp_path / "s.db").st_mode) == 0o600


def test_unreachable_database_is_a_store_error(tmp_path: Path) -> None:
    """A database that cannot be reached raises StoreError, never a driver exception."""
    engine = make_engine(
        "postgresql://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 1}
    )
    with pytest.raises(StoreError):
        SQLAlchemyStore(engine)
