"""One SQLite database shared by the zero-dependency stores, and the SQLite snapshot store.

Sharing is the point: ``SQLiteStore``, ``SQLiteOutboxStore(store)`` and
``SQLiteInbox(store)`` write through one connection, so an outbox row and the snapshot it
describes commit or roll back together. Nested transactions become savepoints, so an inner
block that fails undoes only its own writes and the outer one decides the rest.

The file is created mode 0600 (snapshots and outbox rows hold business data) and opened in
WAL mode, which lets readers run beside the single writer.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from xsm_celery.errors import ConflictError, LockTimeoutError, StoreError, StoreUnavailableError
from xsm_celery.persistence.memory import DEFAULT_MAX_SNAPSHOT_BYTES, check_key, check_snapshot
from xsm_celery.persistence.protocols import StoredSnapshot

__all__ = ["SQLiteDatabase", "SQLiteStore", "create_private_file", "sqlite_error"]


def create_private_file(path: str | os.PathLike[str]) -> None:
    """Create ``path`` with mode 0600 unless it exists; SQLite then opens it as is."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def sqlite_error(what: str, path: str, exc: sqlite3.Error) -> StoreError:
    """The ``StoreError`` for a failed SQLite statement: an outage, or the value refused.

    ``OperationalError`` (file cannot be opened, disk I/O, locked) is the database being
    unusable now, so it is ``StoreUnavailableError`` (``LockTimeoutError`` when locked);
    anything else (a constraint, a value too big) is the statement refused.
    """
    message = f"SQLite {what} failed on {path!r}: {exc}"
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        if "locked" in text or "busy" in text:
            return LockTimeoutError(message)
        return StoreUnavailableError(message)
    return StoreError(message)


class SQLiteDatabase:
    """A thread-safe SQLite connection with nestable transactions.

    Args:
        path: The database file (created 0600), or ``":memory:"``.
        timeout: Seconds to wait for another process's write lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self.path = str(path)
        self.timeout = float(timeout)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            create_private_file(self.path)
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(
                f"cannot open SQLite database {self.path!r}: {exc}"
            ) from exc
        self._lock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None

    @property
    def in_transaction(self) -> bool:
        """Whether the calling thread is inside ``transaction()``."""
        return self._depth > 0 and self._owner == threading.get_ident()

    @contextlib.contextmanager
    def transaction(
        self, *, timeout: float | None = None, what: str = "write"
    ) -> Iterator[sqlite3.Connection]:
        """Run the block in a write transaction (a savepoint when already inside one).

        Raises ``LockTimeoutError`` when another thread holds the database longer than
        ``timeout`` seconds; any exception leaving the block rolls its writes back. A
        driver error raised in the block leaves it as ``StoreError`` naming ``what``
        (``sqlite_error``), as ``write`` does for one statement: an outage
        (``StoreUnavailableError``) and a refused value stay apart for the callers.
        """
        wait = self.timeout if timeout is None else timeout
        if not self._lock.acquire(timeout=max(wait, 0.0)):
            raise LockTimeoutError(
                f"SQLite database {self.path!r} is busy in another thread after {wait}s; "
                "raise the timeout or shorten the transactions"
            )
        try:
            with self._savepoint() if self._depth else self._top_level():
                try:
                    yield self._conn
                except sqlite3.Error as exc:
                    raise sqlite_error(what, self.path, exc) from exc
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def _top_level(self) -> Iterator[None]:
        self._run("BEGIN IMMEDIATE")
        self._depth, self._owner = 1, threading.get_ident()
        try:
            yield
        except BaseException:
            self._depth, self._owner = 0, None
            self._rollback("ROLLBACK")
            raise
        self._depth, self._owner = 0, None
        try:
            self._run("COMMIT")
        except StoreError:
            self._rollback("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _savepoint(self) -> Iterator[None]:
        name = f"xsm_sp_{self._depth}"
        self._run(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            self._rollback(f"ROLLBACK TO {name}")
            self._run(f"RELEASE {name}")
            raise
        self._depth -= 1
        self._run(f"RELEASE {name}")

    def _rollback(self, sql: str) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute(sql)

    def _run(self, sql: str) -> None:
        try:
            self._conn.execute(sql)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise LockTimeoutError(
                    f"SQLite database {self.path!r} is locked by another process: {exc}"
                ) from exc
            verb = sql.split(maxsplit=1)[0]
            raise StoreUnavailableError(f"SQLite {verb} failed on {self.path!r}: {exc}") from exc

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a read and return every row."""
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise sqlite_error("read", self.path, exc) from exc

    def write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one write in the current transaction, or in its own one."""
        with self.transaction() as conn:
            try:
                return conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise sqlite_error("write", self.path, exc) from exc

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement per row in a single transaction."""
        with self.transaction() as conn:
            try:
                conn.executemany(sql, rows)
            except sqlite3.Error as exc:
                raise sqlite_error("write", self.path, exc) from exc

    def script(self, sql: str) -> None:
        """Run a schema script (``CREATE ... IF NOT EXISTS`` statements) in a transaction."""
        with self.transaction() as conn:
            for statement in filter(None, (s.strip() for s in sql.split(";"))):
                try:
                    conn.execute(statement)
                except sqlite3.Error as exc:
                    raise sqlite_error("schema", self.path, exc) from exc

    def columns(self, table: str) -> set[str]:
        """Return the column names of ``table`` (empty when it does not exist)."""
        return {row[1] for row in self.query(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        """Close the connection; the database object is unusable afterwards."""
        with self._lock:
            self._conn.close()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS xsm_snapshots (
    key TEXT PRIMARY KEY,
    snapshot TEXT NOT NULL,
    version INTEGER NOT NULL,
    machine_version TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL
)
"""


class SQLiteStore:
    """Snapshot store in one SQLite file; its ``lock(key)`` is a write transaction.

    Args:
        path: A file path, ``":memory:"``, or an open ``SQLiteDatabase`` to share.
        max_bytes: Largest snapshot accepted, in UTF-8 bytes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | SQLiteDatabase,
        *,
        max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    ) -> None:
        self.db = path if isinstance(path, SQLiteDatabase) else SQLiteDatabase(path)
        self.max_bytes = max_bytes
        self.db.script(_SCHEMA)

    def load(self, key: str) -> StoredSnapshot | None:
        """Return the record of ``key``, or ``None``."""
        rows = self.db.query(
            "SELECT snapshot, version, machine_version, updated_at FROM xsm_snapshots "
            "WHERE key = ?",
            (check_key(key),),
        )
        if not rows:
            return None
        snapshot, version, machine_version, updated_at = rows[0]
        return StoredSnapshot(key, snapshot, version, machine_version, updated_at)

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot``; with ``expected_version`` only over that version."""
        check_key(key)
        check_snapshot(key, snapshot, self.max_bytes)
        with self.db.transaction() as conn:
            row = conn.execute("SELECT version FROM xsm_snapshots WHERE key = ?", (key,)).fetchone()
            current = row[0] if row else 0
            if expected_version is not None and current != expected_version:
                raise ConflictError(
                    f"snapshot {key!r} is at version {current}, expected {expected_version}; "
                    "another writer saved first: reload and retry"
                )
            conn.execute(
                "INSERT INTO xsm_snapshots (key, snapshot, version, machine_version, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET"
                " snapshot = excluded.snapshot, version = excluded.version,"
                " machine_version = excluded.machine_version, updated_at = excluded.updated_at",
                (key, snapshot, current + 1, machine_version or "", time.time()),
            )
        return int(current) + 1

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""
        cursor = self.db.write("DELETE FROM xsm_snapshots WHERE key = ?", (check_key(key),))
        return cursor.rowcount > 0

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Return up to ``limit`` keys starting with ``prefix``, sorted."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.db.query(
            "SELECT key FROM xsm_snapshots WHERE key LIKE ? ESCAPE '\\' ORDER BY key LIMIT ?",
            (escaped + "%", int(limit)),
        )
        return [row[0] for row in rows]

    def lock(self, key: str, *, timeout: float = 10.0) -> contextlib.AbstractContextManager[Any]:
        """Hold the database's write transaction; a failing block rolls it back."""
        check_key(key)
        return self.db.transaction(timeout=timeout)

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """Open a write transaction (a savepoint inside ``lock``) for a save and its rows."""
        return self.db.transaction()

    def close(self) -> None:
        """Close the underlying database."""
        self.db.close()
