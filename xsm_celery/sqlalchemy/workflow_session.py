"""A workflow step on PostgreSQL in as many round trips as the same change made by hand.

By hand, a step is ``BEGIN``, ``SELECT ... FOR UPDATE`` of the row, ``UPDATE``, ``COMMIT``.
Made of the stores' own calls it is ``BEGIN``, an advisory lock, an inbox lookup, a snapshot
load, the snapshot update, the inbox receipt, ``COMMIT``: seven round trips, and on a busy
host each one waits for the database process to be scheduled. Here a step without timers and
outbox rows is ``BEGIN``, ``claim_and_lock``, ``write``, ``COMMIT``:

* ``claim_and_lock`` inserts the message id into the inbox (``ON CONFLICT DO NOTHING``, taking
  over only an expired entry or one without a receipt) and reads the instance row ``FOR
  UPDATE``, in one statement. The row lock keeps two steps of a key apart as the advisory lock
  did, and a row read after waiting for its lock is the newest one. The inbox insert waits for
  a concurrent delivery of the same id and then finds it, so a redelivery is never applied
  twice whichever transaction started first. ``lock_timeout`` is set (transaction-local) in
  the same statement before either wait.
* ``write`` stores the snapshot, the receipt and the step's transition log in one statement
  (data-modifying ``WITH`` clauses). A new instance is an ``INSERT ... ON CONFLICT DO NOTHING``:
  a concurrent first step of the same key makes it a ``ConflictError``, retried uncounted.

A duplicate or a stale message writes nothing: its transaction is rolled back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from xsm_celery.errors import ConflictError
from xsm_celery.persistence.inbox import expiry_time
from xsm_celery.persistence.memory import check_key, check_snapshot
from xsm_celery.persistence.protocols import StoredSnapshot
from xsm_celery.sqlalchemy.database import SQLAlchemyDatabase
from xsm_celery.sqlalchemy.inbox import INBOX_TABLE
from xsm_celery.sqlalchemy.journal import COLUMNS, TRANSITION_TABLE, transition_rows
from xsm_celery.sqlalchemy.tables import SNAPSHOT_TABLE

__all__ = ["postgres_session"]


class SnapshotTable(Protocol):
    """What a session needs of the snapshot store it writes for (``SQLAlchemyStore``)."""

    @property
    def db(self) -> SQLAlchemyDatabase:
        """The store's database, whose transaction the session opens."""

    @property
    def max_bytes(self) -> int:
        """Largest snapshot the store accepts, in UTF-8 bytes."""


_CLAIM_AND_LOCK = sa.text(f"""
WITH claim AS (
    INSERT INTO {INBOX_TABLE} AS i (scope, key, fingerprint, receipt, expires_at)
    SELECT :scope, :message, '', NULL, CAST(:expires AS DOUBLE PRECISION)
    WHERE set_config('lock_timeout', :timeout, true) IS NOT NULL
    ON CONFLICT (scope, key) DO UPDATE
        SET receipt = NULL, expires_at = excluded.expires_at
        WHERE i.receipt IS NULL OR i.expires_at <= CAST(:now AS DOUBLE PRECISION)
    RETURNING 1
)
SELECT (SELECT count(*) FROM claim), NULL, NULL, NULL, NULL
UNION ALL
SELECT NULL, s.snapshot, s.version, s.machine_version, s.updated_at FROM (
    SELECT snapshot, version, machine_version, updated_at FROM {SNAPSHOT_TABLE}
    WHERE key = :key FOR UPDATE
) AS s
""")

_RECEIPT = (
    f"receipt AS (UPDATE {INBOX_TABLE} SET receipt = :receipt "
    "WHERE scope = :key AND key = :message)"
)
_UPDATE = (
    f"UPDATE {SNAPSHOT_TABLE} SET snapshot = :snapshot, version = :version, "
    "machine_version = :machine_version, updated_at = :now "
    "WHERE key = :key AND version = :expected"
)
_INSERT = (
    f"INSERT INTO {SNAPSHOT_TABLE} (key, snapshot, version, machine_version, updated_at) "
    "VALUES (:key, :snapshot, :version, :machine_version, :now) ON CONFLICT (key) DO NOTHING"
)


class PostgresSession:
    """One step's transaction on PostgreSQL (see the module docstring)."""

    def __init__(
        self, store: SnapshotTable, conn: Connection, key: str, message_id: str, *, log: bool
    ) -> None:
        self._store = store
        self._conn = conn
        self._key = key
        self._message_id = message_id
        self._log = log
        self._pending: dict[str, Any] | None = None
        self.finished = False
        self.duplicate = False
        self.record: StoredSnapshot | None = None

    def claim_and_lock(self, *, timeout: float, ttl_s: float | None) -> None:
        """Claim the message id and lock and read the instance, in one statement."""
        now = time.time()
        params = {
            "scope": self._key,
            "message": self._message_id,
            "key": self._key,
            "expires": expiry_time(ttl_s, now),
            "now": now,
            "timeout": f"{max(int(timeout * 1000), 1)}ms",
        }
        with self._store.db.guard(f"locking {self._key!r}"):
            rows = self._conn.execute(_CLAIM_AND_LOCK, params).all()
        claimed = next((r[0] for r in rows if r[0] is not None), 0)
        self.duplicate = not claimed
        found = [r for r in rows if r[0] is None]
        if found and not self.duplicate:
            row = found[0]
            self.record = StoredSnapshot(
                self._key, row[1], int(row[2]), row[3] or "", float(row[4])
            )

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Check the snapshot and keep it for ``finish``, which writes it with the receipt."""
        check_key(key)
        check_snapshot(key, snapshot, self._store.max_bytes)
        current = self.record.version if self.record is not None else 0
        if expected_version is not None and expected_version != current:
            raise ConflictError(
                f"snapshot {key!r} is at version {current}, expected {expected_version}"
            )
        self._pending = {
            "key": key,
            "snapshot": snapshot,
            "version": current + 1,
            "machine_version": machine_version or "",
            "expected": current,
        }
        return current + 1

    def finish(
        self, receipt: str, summary: dict[str, Any], transitions: list[dict[str, Any]]
    ) -> None:
        """The snapshot, the receipt and the transition log, in one statement."""
        if self._pending is None:
            raise ConflictError(f"workflow step of {self._key!r} finished without a snapshot")
        params: dict[str, Any] = {
            **self._pending,
            "receipt": receipt,
            "message": self._message_id,
            "now": time.time(),
        }
        rows = transition_rows(transitions) if self._log else []
        for n, row in enumerate(rows):
            params.update({f"t{n}_{c}": row[c] for c in COLUMNS})
        statement = _write_statement(bool(self._pending["expected"]), len(rows))
        with self._store.db.guard("save"):
            written = self._conn.execute(statement, params).rowcount
        if written != 1:
            raise ConflictError(
                f"snapshot {self._key!r} was written by another step meanwhile; reload and retry"
            )
        self.finished = True


@functools.lru_cache(maxsize=64)
def _write_statement(update: bool, logged: int) -> sa.TextClause:
    """The write of a step with ``logged`` transitions (cached: steps repeat a few shapes)."""
    clauses = [_RECEIPT]
    if logged:
        values = ", ".join(
            "(" + ", ".join(f":t{n}_{c}" for c in COLUMNS) + ")" for n in range(logged)
        )
        clauses.append(
            f"log AS (INSERT INTO {TRANSITION_TABLE} ({', '.join(COLUMNS)}) VALUES {values})"
        )
    return sa.text(f"WITH {', '.join(clauses)} {_UPDATE if update else _INSERT}")


@contextmanager
def postgres_session(
    store: SnapshotTable,
    key: str,
    message_id: str,
    *,
    timeout: float,
    ttl_s: float | None,
    log: bool,
) -> Iterator[PostgresSession]:
    """Open the step's transaction on ``store`` (PostgreSQL) and claim, lock and load.

    Raises:
        LockTimeoutError: the instance (or a concurrent delivery of the same message) stayed
            locked ``timeout`` seconds.
    """
    check_key(key)
    with store.db.transaction() as conn, store.db.flat():
        session = PostgresSession(store, conn, key, message_id, log=log)
        session.claim_and_lock(timeout=timeout, ttl_s=ttl_s)
        yield session
        if not session.finished:
            # A duplicate or stale message: its inbox claim must not be kept.
            conn.get_transaction().rollback()  # type: ignore[union-attr]
