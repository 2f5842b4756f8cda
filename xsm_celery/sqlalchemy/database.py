"""``SQLAlchemyDatabase``: an engine plus the transaction the calling thread has open on it.

Every SQLAlchemy store built over another one (``SQLAlchemyInbox(store)``,
``SQLAlchemyOutboxStore(store)``, the timers and the transition log) writes through the same
thread-local connection, so its rows commit or roll back with the snapshot they describe.
The companions find that connection here (``database_of``) without importing the snapshot
store, which builds them into a workflow's family (``SQLAlchemyStore.workflow_family``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy.engine import URL, Connection, Engine

from xsm_celery.errors import LockTimeoutError, StoreError, StoreUnavailableError
from xsm_celery.sqlalchemy.connect import SQLITE_BUSY_TIMEOUT_S, make_engine, safe_url
from xsm_celery.sqlalchemy.outages import is_outage

__all__ = ["DatabaseOwner", "SQLAlchemyDatabase", "database_of", "upsert_insert"]


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


@runtime_checkable
class DatabaseOwner(Protocol):
    """A store whose companion stores write through its database (``SQLAlchemyStore``)."""

    @property
    def db(self) -> SQLAlchemyDatabase:
        """The database, and the transaction, the store and its companions share."""


#: The dialects whose ``INSERT ... ON CONFLICT`` the companion stores use for upserts.
_DIALECT_INSERTS: dict[str, Any] = {
    "sqlite": sqlalchemy.dialects.sqlite.insert,
    "postgresql": sqlalchemy.dialects.postgresql.insert,
}


def database_of(
    store: DatabaseOwner | SQLAlchemyDatabase | Engine | str | URL,
) -> SQLAlchemyDatabase:
    """The database a companion store (outbox, inbox, idempotency keys) works in.

    Given a ``SQLAlchemyStore`` it is the store's own database, so the companion's writes join
    the snapshot's transaction; an ``Engine`` or a URL opens a database of its own.
    """
    if isinstance(store, SQLAlchemyDatabase):
        return store
    if isinstance(store, DatabaseOwner):
        return store.db
    return SQLAlchemyDatabase(store)


def upsert_insert(db: SQLAlchemyDatabase) -> Any:
    """The dialect's ``insert`` with ``on_conflict_do_update``, or None where it has none."""
    return _DIALECT_INSERTS.get(db.dialect)
