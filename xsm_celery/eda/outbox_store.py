"""Outbox stores: envelopes waiting for the relay, with row leases for several relays.

``SQLiteOutboxStore(sqlite_store)`` writes through the snapshot store's database, so a
row commits or rolls back with the snapshot it describes. ``MemoryOutboxStore`` is the
same behaviour in memory, for tests.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from xsm_celery.eda import lease_ranges
from xsm_celery.eda.envelope import Envelope
from xsm_celery.eda.lease_ranges import LEASE_SCHEMA, PENDING
from xsm_celery.eda.outbox_protocols import FailedOutboxRecord, OutboxRecord
from xsm_celery.errors import ArgumentTypeError, ConfigurationError, StoreError
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S
from xsm_celery.persistence.sqlite import SQLiteDatabase, SQLiteStore

__all__ = ["MAX_ERROR_CHARS", "MemoryOutboxStore", "SQLiteOutboxStore"]

#: Characters of a refusal's text a row keeps (a driver message can be long).
MAX_ERROR_CHARS = 2000


def _check_claim(limit: int, owner: str, lease_s: float) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
    if not isinstance(owner, str) or not owner or len(owner) > 128:
        raise ConfigurationError(
            f"owner must be a non-empty string of at most 128 characters: {owner!r}"
        )
    if not lease_s > 0:
        raise ConfigurationError(f"lease_s must be > 0 seconds, got {lease_s!r}")


def check_refusal(owner: str, error: str, max_attempts: int) -> str:
    """Validate ``record_refusal``'s arguments; return the error text as it is stored."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    if not isinstance(owner, str) or not owner:
        raise ConfigurationError(f"owner must be a non-empty string, got {owner!r}")
    return str(error)[:MAX_ERROR_CHARS]


def check_limit(limit: int) -> int:
    """Validate a row limit (an int >= 0)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an int >= 0, got {limit!r}")
    return limit


@dataclass
class _Row:
    topic: str
    envelope: Envelope
    created_at: float
    sent_at: float | None = None
    claimed_by: str | None = None
    claimed_until: float | None = None
    attempts: int = 0
    last_error: str | None = None
    failed_at: float | None = None


class MemoryOutboxStore:
    """Thread-safe in-memory outbox with the same leases as the SQL stores.

    Args:
        clock: Epoch-seconds clock for leases and ``purge_sent`` (tests inject one).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rows: dict[int, _Row] = {}
        # Unsent rows that are not failed, in sequence order: what pending() and claim() see.
        self._unsent: dict[int, None] = {}
        self._failed: dict[int, None] = {}
        self._next = 1
        self._lock = threading.Lock()

    def add(self, topic: str, envelope: Envelope) -> int:
        """Append a row and return its sequence number."""
        if not isinstance(envelope, Envelope):
            raise ArgumentTypeError(f"add() needs an Envelope, got {type(envelope).__name__}")
        with self._lock:
            seq = self._next
            self._next += 1
            self._rows[seq] = _Row(topic, envelope, self._clock())
            self._unsent[seq] = None
        return seq

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        """Return up to ``limit`` unsent rows in sequence order."""
        with self._lock:
            seqs = list(self._unsent)[: max(limit, 0)]
            return [OutboxRecord(s, self._rows[s].topic, self._rows[s].envelope) for s in seqs]

    def claim(
        self, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[OutboxRecord]:
        """Lease up to ``limit`` unsent rows to ``owner``, skipping others' live leases."""
        _check_claim(limit, owner, lease_s)
        now = self._clock()
        out: list[OutboxRecord] = []
        with self._lock:
            for seq in self._unsent:
                if len(out) >= limit:
                    break
                row = self._rows[seq]
                held = row.claimed_until is not None and row.claimed_until > now
                if held and row.claimed_by != owner:
                    continue
                row.claimed_by, row.claimed_until = owner, now + lease_s
                out.append(OutboxRecord(seq, row.topic, row.envelope))
        return out

    def release(self, seqs: Iterable[int], owner: str) -> int:
        """Hand back ``owner``'s leases on ``seqs``; return how many were released."""
        released = 0
        with self._lock:
            for seq in seqs:
                row = self._rows.get(seq)
                if row is not None and row.sent_at is None and row.claimed_by == owner:
                    row.claimed_by = row.claimed_until = None
                    released += 1
        return released

    def mark_sent(self, seqs: Iterable[int]) -> int:
        """Mark rows as published; return how many changed."""
        now = self._clock()
        changed = 0
        with self._lock:
            for seq in seqs:
                row = self._rows.get(seq)
                if row is not None and row.sent_at is None:
                    row.sent_at = now
                    row.claimed_by = row.claimed_until = None
                    self._unsent.pop(seq, None)
                    self._failed.pop(seq, None)
                    changed += 1
        return changed

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        cutoff = self._clock() - older_than_s
        with self._lock:
            doomed = [
                seq
                for seq, row in self._rows.items()
                if row.sent_at is not None and row.sent_at <= cutoff
            ]
            for seq in doomed:
                del self._rows[seq]
        return len(doomed)

    def count(self, *, pending_only: bool = False, failed_only: bool = False) -> int:
        """Return how many rows are held (only pending or only failed ones if asked)."""
        with self._lock:
            if failed_only:
                return len(self._failed)
            return len(self._unsent) if pending_only else len(self._rows)

    def record_refusal(self, seq: int, owner: str, error: str, *, max_attempts: int) -> int:
        """Count one refusal of ``owner``'s row ``seq``; fail it at ``max_attempts``."""
        text = check_refusal(owner, error, max_attempts)
        with self._lock:
            row = self._rows.get(seq)
            if row is None or seq not in self._unsent or row.claimed_by != owner:
                return 0
            row.attempts += 1
            row.last_error = text
            row.claimed_by = row.claimed_until = None
            if row.attempts >= max_attempts:
                row.failed_at = self._clock()
                del self._unsent[seq]
                self._failed[seq] = None
            return row.attempts

    def failed(self, limit: int = 100) -> list[FailedOutboxRecord]:
        """Return up to ``limit`` failed rows in sequence order."""
        check_limit(limit)
        with self._lock:
            seqs = sorted(self._failed)[:limit]
            return [self._failed_record(seq) for seq in seqs]

    def _failed_record(self, seq: int) -> FailedOutboxRecord:
        row = self._rows[seq]
        return FailedOutboxRecord(
            seq, row.topic, row.envelope, row.attempts, row.last_error or "", row.failed_at or 0.0
        )

    def requeue(self, seq: int) -> bool:
        """Make failed row ``seq`` pending again with its attempts reset."""
        with self._lock:
            if seq not in self._failed:
                return False
            del self._failed[seq]
            row = self._rows[seq]
            row.attempts, row.failed_at = 0, None
            self._unsent = dict.fromkeys(sorted([*self._unsent, seq]))
            return True

    def oldest_pending_at(self) -> float | None:
        """When the oldest unsent row was added (epoch s), or None when none waits."""
        with self._lock:
            first = next(iter(self._unsent), None)
            return None if first is None else self._rows[first].created_at


_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS xsm_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    topic TEXT NOT NULL,
    subject TEXT,
    envelope TEXT NOT NULL,
    created_at REAL NOT NULL,
    sent_at REAL,
    claimed_by VARCHAR(128),
    claimed_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    failed_at REAL
);
CREATE INDEX IF NOT EXISTS xsm_outbox_unsent ON xsm_outbox (seq) WHERE sent_at IS NULL;
"""
    + LEASE_SCHEMA
)
#: Columns added after the first release; a table made before them gains them on open.
_ADDED_COLUMNS = (
    ("claimed_by", "VARCHAR(128)"),
    ("claimed_until", "REAL"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT"),
    ("failed_at", "REAL"),
)


class SQLiteOutboxStore:
    """Outbox in SQLite (WAL, file 0600), sharing a ``SQLiteStore``'s transactions.

    Built over a ``SQLiteStore`` it writes through the same connection: rows added while
    a snapshot is being saved commit or roll back with it. Opening a table made by an
    older version adds the lease and refusal columns (``attempts``, ``last_error``,
    ``failed_at``).

    A claim leases its rows as ranges in ``xsm_outbox_lease`` (``lease_ranges``): one
    small write per batch, where stamping every row cost as much as marking it sent. Rows
    an older version leased in their own ``claimed_by`` / ``claimed_until`` columns are
    still respected, but a store that stamps rows (an older version of this one, or a
    SQLAlchemy store on the same file) does not see range leases: stop such relays before
    starting these, or accept that rows in flight then may be published twice (consumers
    dedup on the envelope id).

    Args:
        store_or_path: A ``SQLiteStore`` to share, a ``SQLiteDatabase``, or a file path.
        clock: Epoch-seconds clock for leases and ``purge_sent``.
    """

    def __init__(
        self,
        store_or_path: SQLiteStore | SQLiteDatabase | str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(store_or_path, SQLiteStore):
            self.db = store_or_path.db
        elif isinstance(store_or_path, SQLiteDatabase):
            self.db = store_or_path
        else:
            self.db = SQLiteDatabase(store_or_path)
        self._clock = clock
        self.db.script(_SCHEMA)
        present = self.db.columns("xsm_outbox")
        for name, kind in _ADDED_COLUMNS:
            if name not in present:
                self.db.write(f"ALTER TABLE xsm_outbox ADD COLUMN {name} {kind}")

    def add(self, topic: str, envelope: Envelope) -> int:
        """Append a row (in the current transaction, if any) and return its sequence number."""
        if not isinstance(envelope, Envelope):
            raise ArgumentTypeError(f"add() needs an Envelope, got {type(envelope).__name__}")
        cursor = self.db.write(
            "INSERT INTO xsm_outbox (id, topic, subject, envelope, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (envelope.id, topic, envelope.subject, envelope.to_json(), self._clock()),
        )
        if cursor.lastrowid is None:
            raise StoreError("SQLite did not return the new outbox row's sequence number")
        return int(cursor.lastrowid)

    def add_many(self, rows: Iterable[tuple[str, Envelope]]) -> None:
        """Append several rows in one transaction (faster than ``add`` in a loop)."""
        now = self._clock()
        self.db.write_many(
            "INSERT INTO xsm_outbox (id, topic, subject, envelope, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(env.id, topic, env.subject, env.to_json(), now) for topic, env in rows],
        )

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        """Return up to ``limit`` unsent rows in sequence order."""
        rows = self.db.query(
            f"SELECT seq, topic, envelope FROM xsm_outbox WHERE {PENDING} ORDER BY seq LIMIT ?",
            (int(limit),),
        )
        return [_record(row) for row in rows]

    def claim(
        self, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[OutboxRecord]:
        """Lease up to ``limit`` unsent rows to ``owner``, skipping others' live leases."""
        _check_claim(limit, owner, lease_s)
        now = self._clock()
        with self.db.transaction(what="claim") as conn:
            rows = lease_ranges.claim_runs(conn, limit, owner, now, now + lease_s)
        return [_record(row) for row in rows]

    def release(self, seqs: Iterable[int], owner: str) -> int:
        """Hand back ``owner``'s leases on ``seqs``; return how many were released."""
        wanted = list(seqs)
        with self.db.transaction(what="release") as conn:
            held = lease_ranges.held_by(conn, wanted, owner)
            self._chunks(
                conn,
                "UPDATE xsm_outbox SET claimed_by = NULL, claimed_until = NULL "
                "WHERE claimed_by = ? AND seq IN ({})",
                (owner,),
                held,
            )
            lease_ranges.cut(conn, held, owner)
        return len(held)

    def mark_sent(self, seqs: Iterable[int]) -> int:
        """Mark rows as published; return how many changed."""
        wanted = list(seqs)
        with self.db.transaction(what="mark_sent") as conn:
            changed = self._chunks(
                conn,
                "UPDATE xsm_outbox SET sent_at = ?, claimed_by = NULL, claimed_until = NULL "
                "WHERE sent_at IS NULL AND seq IN ({})",
                (self._clock(),),
                wanted,
            )
            if changed:
                lease_ranges.drop_spent(conn, min(wanted), max(wanted))
        return changed

    @staticmethod
    def _chunks(
        conn: sqlite3.Connection, sql: str, head: tuple[object, ...], seqs: list[int]
    ) -> int:
        """Run ``sql`` over ``seqs`` in ``IN`` lists (``lease_ranges.in_lists``); sum the rows."""
        return sum(
            conn.execute(sql.format(marks), (*head, *part)).rowcount
            for part, marks in lease_ranges.in_lists(seqs)
        )

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        cutoff = self._clock() - older_than_s
        return self.db.write(
            "DELETE FROM xsm_outbox WHERE sent_at IS NOT NULL AND sent_at <= ?", (cutoff,)
        ).rowcount

    def count(self, *, pending_only: bool = False, failed_only: bool = False) -> int:
        """Return how many rows are held (only pending or only failed ones if asked)."""
        where = ""
        if failed_only:
            where = " WHERE sent_at IS NULL AND failed_at IS NOT NULL"
        elif pending_only:
            where = f" WHERE {PENDING}"
        return int(self.db.query(f"SELECT COUNT(*) FROM xsm_outbox{where}")[0][0])

    def record_refusal(self, seq: int, owner: str, error: str, *, max_attempts: int) -> int:
        """Count one refusal of ``owner``'s row ``seq``; fail it at ``max_attempts``."""
        text = check_refusal(owner, error, max_attempts)
        now = self._clock()
        with self.db.transaction(what="record_refusal") as conn:
            if not lease_ranges.held_by(conn, [seq], owner):
                return 0
            (found,) = conn.execute("SELECT attempts FROM xsm_outbox WHERE seq = ?", (seq,))
            attempts = int(found[0]) + 1
            conn.execute(
                "UPDATE xsm_outbox SET attempts = ?, last_error = ?, failed_at = ?, "
                "claimed_by = NULL, claimed_until = NULL WHERE seq = ?",
                (attempts, text, now if attempts >= max_attempts else None, seq),
            )
            lease_ranges.cut(conn, [seq], owner)
        return attempts

    def failed(self, limit: int = 100) -> list[FailedOutboxRecord]:
        """Return up to ``limit`` failed rows in sequence order."""
        rows = self.db.query(
            "SELECT seq, topic, envelope, attempts, last_error, failed_at FROM xsm_outbox "
            "WHERE sent_at IS NULL AND failed_at IS NOT NULL ORDER BY seq LIMIT ?",
            (check_limit(limit),),
        )
        return [failed_record(row) for row in rows]

    def requeue(self, seq: int) -> bool:
        """Make failed row ``seq`` pending again with its attempts reset.

        It is free at once: a lease range another relay took across it since it failed
        does not hold it.
        """
        with self.db.transaction(what="requeue") as conn:
            changed = conn.execute(
                "UPDATE xsm_outbox SET attempts = 0, failed_at = NULL "
                "WHERE seq = ? AND sent_at IS NULL AND failed_at IS NOT NULL",
                (seq,),
            ).rowcount
            if changed:
                lease_ranges.cut(conn, [seq])
        return changed > 0

    def oldest_pending_at(self) -> float | None:
        """When the oldest pending row was added (epoch s), or None when none waits."""
        rows = self.db.query(f"SELECT MIN(created_at) FROM xsm_outbox WHERE {PENDING}")
        value = rows[0][0] if rows else None
        return None if value is None else float(value)


def failed_record(row: Sequence[Any]) -> FailedOutboxRecord:
    """A ``(seq, topic, envelope, attempts, last_error, failed_at)`` row as a record."""
    seq, topic, text, attempts, last_error, failed_at = row
    envelope = Envelope.from_trusted_json(text)
    return FailedOutboxRecord(
        int(seq), topic, envelope, int(attempts), last_error or "", float(failed_at)
    )


def _record(row: tuple[int, str, str]) -> OutboxRecord:
    seq, topic, text = row
    return OutboxRecord(seq, topic, Envelope.from_trusted_json(text))
