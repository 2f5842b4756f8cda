"""``SQLAlchemyStore``: machine snapshots in any SQL database, with a shared transaction.

The store's ``lock(key)`` is a database transaction (plus a per-key lock: a PostgreSQL
advisory lock, SQLite's write lock), and every write made on the same thread while it is
open goes through the same connection: ``SQLAlchemyOutboxStore(store)`` and
``SQLAlchemyInbox(store)`` rows therefore commit or roll back with the snapshot they
describe. ``SQLAlchemyDatabase`` is that thread-local connection, shared by the three.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.errors import (
    ConflictError,
    LockTimeoutError,
    StoreError,
    StoreUnavailableError,
)
from xsm_celery.persistence.memory import DEFAULT_MAX_SNAPSHOT_BYTES, check_key, check_snapshot
from xsm_celery.persistence.protocols import StoredSnapshot
from xsm_celery.sqlalchemy.connect import SQLITE_BUSY_TIMEOUT_S, make_engine, safe_url
from xsm_celery.sqlalchemy.outages import is_outage

__all__ = [
    "SNAPSHOT_TABLE",
    "SQLAlchemyDatabase",
    "SQLAlchemyStore",
    "database_of",
    "upsert_insert",
]

#: Name of the table holding snapshots (the same shape as ``SQLiteStore``'s).
SNAPSHOT_TABLE = "xsm_snapshots"

_metadata = sa.MetaData()
snapshot_table = sa.Table(
    SNAPSHOT_TABLE,
    _metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("snapshot", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("machine_version", sa.String(255), nullable=False, default=""),
    sa.Column("updated_at", sa.Float, nullable=False),
)

_READ_ONLY = "xsm_read_only"
_LOCK_NOT_AVAILABLE = "55P03"


class SQLAlchemyDatabase:
    """An engine plus the transaction the calling thread has open on it, if any.

    Args:
        engine: An ``Engine`` or a URL. For a SQLite URL the engine is made here and its
            write transactions start with ``BEGIN IMMEDIATE``, so two processes never
            deadlock upgrading a read lock; pass a URL rather than a SQLite engine.
    """

    def __init__(self, engine: Engine | str | URL) -> None:
        if isinstance(engine, Engine):
            self.engine = engine
        else:
            self.engine = make_engine(engine)
            if self.engine.dialect.name == "sqlite":
                _immediate_transactions(self.engine)
        self.dialect = self.engine.dialect.name
        self._local = threading.local()

    @property
    def current(self) -> Connection | None:
        """The connection of the transaction this thread has open, or ``None``."""
        conn: Connection | None = getattr(self._local, "conn", None)
        return conn

    @contextlib.contextmanager
    def transaction(self, *, timeout: float | None = None) -> Iterator[Connection]:
        """Run the block in a transaction; inside one already, in a savepoint of it.

        Any exception leaving the block rolls back its writes; driver failures become
        ``StoreError`` (``StoreUnavailableError`` when the database is unreachable).
        ``timeout`` bounds the wait for SQLite's write lock (``LockTimeoutError``).
        """
        conn = self.current
        if conn is not None and getattr(self._local, "flat", False):
            yield conn
            return
        if conn is not None:
            with self.guard("savepoint"), conn.begin_nested():
                yield conn
            return
        with self.guard("transaction"), self.engine.connect() as fresh:
            if timeout is not None and self.dialect == "sqlite":
                _sqlite_busy_timeout(fresh, timeout)
            try:
                with fresh.begin():
                    self._local.conn = fresh
                    try:
                        yield fresh
                    finally:
                        self._local.conn = None
            finally:
                if timeout is not None and self.dialect == "sqlite":
                    _sqlite_busy_timeout(fresh, SQLITE_BUSY_TIMEOUT_S)

    @contextlib.contextmanager
    def flat(self) -> Iterator[None]:
        """Inside the block, nested ``transaction()`` calls join the open one without savepoints.

        For a caller that rolls the whole transaction back on any error (a workflow step under
        ``lock``): a savepoint per write would only cost round trips.
        """
        previous = getattr(self._local, "flat", False)
        self._local.flat = True
        try:
            yield
        finally:
            self._local.flat = previous

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads: the open transaction's, or a fresh one that never locks."""
        conn = self.current
        if conn is not None:
            yield conn
            return
        with self.guard("read"), self.engine.connect() as fresh:
            fresh.info[_READ_ONLY] = True
            try:
                yield fresh
            finally:
                # An invalidated connection (the server went away mid-read) cannot even show
                # its info without a rollback; touching it would turn the outage the read
                # reported into a refusal.
                if not fresh.invalidated:
                    fresh.info.pop(_READ_ONLY, None)
                fresh.rollback()

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn a driver failure into the package's ``StoreError`` family."""
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            if not is_outage(exc):
                raise StoreError(
                    f"database {safe_url(self.engine)!r} refused {what}: {exc}"
                ) from exc
            code = getattr(getattr(exc, "orig", None), "sqlstate", None)
            text = str(getattr(exc, "orig", None) or exc)
            if code == _LOCK_NOT_AVAILABLE or "locked" in text:
                raise LockTimeoutError(
                    f"{safe_url(self.engine)!r} stayed locked during {what}: {text}"
                ) from exc
            raise StoreUnavailableError(
                f"database {safe_url(self.engine)!r} is unreachable during {what}: {text}"
            ) from exc

    def create(self, table: sa.Table) -> None:
        """Create ``table`` (and its indexes) unless it exists.

        Two processes opening a fresh database at once (a worker and the web process) both
        see no table and both create it; the one that loses the race finds it there.
        """
        with self.guard(f"creating {table.name}"):
            try:
                table.create(self.engine, checkfirst=True)
            except sa.exc.SQLAlchemyError:
                if not sa.inspect(self.engine).has_table(table.name):
                    raise


def _immediate_transactions(engine: Engine) -> None:
    """Make SQLite write transactions take the write lock up front (``BEGIN IMMEDIATE``).

    pysqlite's own transaction handling is turned off so that SQLAlchemy's ``begin``
    event decides; reads (``SQLAlchemyDatabase.reading``) still begin deferred.
    """

    @sa.event.listens_for(engine, "connect")
    def _autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN" if conn.info.get(_READ_ONLY) else "BEGIN IMMEDIATE")


def _sqlite_busy_timeout(conn: Connection, seconds: float) -> None:
    """Set how long SQLite waits for the write lock, outside any transaction."""
    raw: Any = conn.connection.driver_connection
    raw.execute(f"PRAGMA busy_timeout = {max(int(seconds * 1000), 1)}")


def advisory_key(key: str) -> int:
    """A signed 64-bit number for ``key``, stable across processes (PostgreSQL lock id)."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class SQLAlchemyStore:
    """A ``StateStore`` over SQLAlchemy: SQLite and PostgreSQL are tested.

    Args:
        engine: An ``Engine``, a URL, or a ``SQLAlchemyDatabase`` to share.
        max_bytes: Largest snapshot accepted, in UTF-8 bytes.
        create_table: Create the snapshot table when it is missing (off when a
            migration owns the schema).
    """

    def __init__(
        self,
        engine: Engine | str | URL | SQLAlchemyDatabase,
        *,
        max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        create_table: bool = True,
    ) -> None:
        self.db = engine if isinstance(engine, SQLAlchemyDatabase) else SQLAlchemyDatabase(engine)
        self.max_bytes = int(max_bytes)
        if create_table:
            self.db.create(snapshot_table)

    @property
    def engine(self) -> Engine:
        """The engine every store sharing this one writes through."""
        return self.db.engine

    def load(self, key: str) -> StoredSnapshot | None:
        """Return the record of ``key``, or ``None``."""
        t = snapshot_table
        query = sa.select(t.c.snapshot, t.c.version, t.c.machine_version, t.c.updated_at).where(
            t.c.key == check_key(key)
        )
        with self.db.reading() as conn, self.db.guard("load"):
            row = conn.execute(query).first()
        if row is None:
            return None
        return StoredSnapshot(key, row[0], int(row[1]), row[2] or "", float(row[3]))

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot``; with ``expected_version`` only over that version.

        Raises:
            ConflictError: the stored version is not ``expected_version``.
        """
        check_key(key)
        check_snapshot(key, snapshot, self.max_bytes)
        values = {"snapshot": snapshot, "machine_version": machine_version or ""}
        with self.db.transaction() as conn, self.db.guard("save"):
            if expected_version:
                # The common case in one round trip: the version is the one expected.
                moved = conn.execute(
                    snapshot_table.update()
                    .where(snapshot_table.c.key == key,
                           snapshot_table.c.version == expected_version)
                    .values(**values, version=expected_version + 1, updated_at=time.time())
                ).rowcount  # fmt: skip
                if moved == 1:
                    return expected_version + 1
            current = self._current_version(conn, key)
            if expected_version is not None and current != expected_version:
                raise _conflict(key, current, expected_version)
            now = time.time()
            if current:
                conn.execute(
                    snapshot_table.update()
                    .where(snapshot_table.c.key == key)
                    .values(**values, version=current + 1, updated_at=now)
                )
            else:
                self._insert_first(conn, key, values, now)
        return current + 1

    def _insert_first(self, conn: Connection, key: str, values: dict[str, Any], now: float) -> None:
        """Insert version 1; a concurrent first save of the same key is a conflict."""
        try:
            with conn.begin_nested():
                conn.execute(
                    snapshot_table.insert().values(key=key, version=1, updated_at=now, **values)
                )
        except sa.exc.IntegrityError as exc:
            raise ConflictError(
                f"snapshot {key!r} was created by another writer meanwhile; reload and retry"
            ) from exc

    def _current_version(self, conn: Connection, key: str) -> int:
        query = sa.select(snapshot_table.c.version).where(snapshot_table.c.key == key)
        if self.db.dialect != "sqlite":
            query = query.with_for_update()
        found = conn.execute(query).scalar()
        return int(found or 0)

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""
        statement = snapshot_table.delete().where(snapshot_table.c.key == check_key(key))
        with self.db.transaction() as conn, self.db.guard("delete"):
            return conn.execute(statement).rowcount > 0

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Return up to ``limit`` keys starting with ``prefix``, sorted."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = (
            sa.select(snapshot_table.c.key)
            .where(snapshot_table.c.key.like(escaped + "%", escape="\\"))
            .order_by(snapshot_table.c.key)
            .limit(max(int(limit), 0))
        )
        with self.db.reading() as conn, self.db.guard("list_keys"):
            return [row[0] for row in conn.execute(query)]

    @contextlib.contextmanager
    def lock(self, key: str, *, timeout: float = 10.0) -> Iterator[Connection]:
        """Hold ``key`` exclusively inside a transaction; a failing block rolls it back.

        PostgreSQL takes a transaction-scoped advisory lock on the key (other keys stay
        free); SQLite's ``BEGIN IMMEDIATE`` holds the whole database's write lock.

        Raises:
            LockTimeoutError: the lock was not acquired within ``timeout`` seconds.
        """
        check_key(key)
        with self.db.transaction(timeout=timeout) as conn:
            if self.db.dialect == "postgresql":
                with self.db.guard(f"locking {key!r}"):
                    # One round trip: set_config(..., true) is SET LOCAL, evaluated first.
                    conn.execute(
                        sa.text("SELECT set_config('lock_timeout', :t, true), "
                                "pg_advisory_xact_lock(:k)"),
                        {"t": f"{max(int(timeout * 1000), 1)}ms", "k": advisory_key(key)},
                    )  # fmt: skip
            yield conn

    def transaction(self) -> contextlib.AbstractContextManager[Connection]:
        """Open a transaction (a savepoint inside ``lock``) for a save and its rows."""
        return self.db.transaction()

    def close(self) -> None:
        """Release the engine's pooled connections."""
        self.db.engine.dispose()


def _conflict(key: str, current: int, expected: int) -> ConflictError:
    return ConflictError(
        f"snapshot {key!r} is at version {current}, expected {expected}; another writer "
        "saved first: reload and retry"
    )


#: The dialects whose ``INSERT ... ON CONFLICT`` the companion stores use for upserts.
_DIALECT_INSERTS: dict[str, Any] = {
    "sqlite": sqlalchemy.dialects.sqlite.insert,
    "postgresql": sqlalchemy.dialects.postgresql.insert,
}


def database_of(
    store: SQLAlchemyStore | SQLAlchemyDatabase | Engine | str | URL,
) -> SQLAlchemyDatabase:
    """The database a companion store (outbox, inbox, idempotency keys) works in.

    Given a ``SQLAlchemyStore`` it is the store's own database, so the companion's writes join
    the snapshot's transaction; an ``Engine`` or a URL opens a database of its own.
    """
    if isinstance(store, SQLAlchemyStore):
        return store.db
    if isinstance(store, SQLAlchemyDatabase):
        return store
    return SQLAlchemyDatabase(store)


def upsert_insert(db: SQLAlchemyDatabase) -> Any:
    """The dialect's ``insert`` with ``on_conflict_do_update``, or None where it has none."""
    return _DIALECT_INSERTS.get(db.dialect)
