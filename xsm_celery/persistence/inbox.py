"""Inboxes: the idempotency keys already processed, so a redelivery is answered, not re-run.

A key is first *claimed* (in flight), then *marked* with the receipt of the work it did.
A redelivery that finds a receipt is a duplicate; one that finds a live claim is the
same message running elsewhere (or a crash the claim's TTL will clear), so it is retried
later rather than run twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from typing import Any

from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.protocols import InboxEntry
from xsm_celery.persistence.sqlite import SQLiteDatabase, SQLiteStore

__all__ = ["MemoryInbox", "SQLiteInbox", "expiry_time", "fingerprint"]


def fingerprint(event_type: str, payload: Any) -> str:
    """Return a stable digest of an event, to catch a reused id carrying other content."""
    canonical = json.dumps(
        {"type": event_type, "payload": payload}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def expiry_time(ttl_s: float | None, now: float) -> float | None:
    """When an inbox entry written at ``now`` with ``ttl_s`` expires (None: never).

    Every inbox backend computes it here, so they agree on the argument order and refuse the
    same bad values.

    Raises:
        ValueError: ``ttl_s`` is negative, NaN, infinite or not a number.
    """
    if ttl_s is None:
        return None
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not 0 <= ttl_s < math.inf:
        raise ConfigurationError(
            f"ttl_s must be None or a finite number of seconds >= 0, got {ttl_s!r}"
        )
    return now + float(ttl_s)


def _live(entry: InboxEntry | None, now: float) -> bool:
    return entry is not None and (entry.expires_at is None or entry.expires_at > now)


class MemoryInbox:
    """Thread-safe in-memory inbox for tests and single-process consumers."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], InboxEntry] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """Return the live entry for ``(scope, key)``, or ``None``."""
        with self._lock:
            entry = self._entries.get((scope, key))
        return entry if _live(entry, time.time()) else None

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Record ``(scope, key)`` in flight unless a live entry exists; return whether it won."""
        now = time.time()
        with self._lock:
            if _live(self._entries.get((scope, key)), now):
                return False
            self._entries[(scope, key)] = InboxEntry(fingerprint, None, expiry_time(ttl_s, now))
            return True

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of ``(scope, key)``."""
        with self._lock:
            old = self._entries.get((scope, key))
            fp = old.fingerprint if old else ""
            self._entries[(scope, key)] = InboxEntry(fp, receipt, expiry_time(ttl_s, time.time()))

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim; a completed entry is kept."""
        with self._lock:
            entry = self._entries.get((scope, key))
            if entry is not None and entry.receipt is None:
                del self._entries[(scope, key)]

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired entries; return how many."""
        when = time.time() if now is None else now
        with self._lock:
            dead = [k for k, e in self._entries.items() if not _live(e, when)]
            for k in dead:
                del self._entries[k]
        return len(dead)

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many."""
        with self._lock:
            doomed = [k for k in self._entries if k[0] == scope]
            for k in doomed:
                del self._entries[k]
        return len(doomed)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS xsm_inbox (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    receipt TEXT,
    expires_at REAL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS xsm_inbox_expires ON xsm_inbox (expires_at)
"""


class SQLiteInbox:
    """Inbox in SQLite; given a ``SQLiteStore`` it shares its database and transactions.

    Sharing the store's database means the receipt is written in the same transaction as
    the snapshot, so a crash cannot leave a processed event without its receipt.
    """

    def __init__(
        self, store_or_path: SQLiteStore | SQLiteDatabase | str | os.PathLike[str]
    ) -> None:
        if isinstance(store_or_path, SQLiteStore):
            self.db = store_or_path.db
        elif isinstance(store_or_path, SQLiteDatabase):
            self.db = store_or_path
        else:
            self.db = SQLiteDatabase(store_or_path)
        self.db.script(_SCHEMA)

    def shares_transaction_with(self, store: Any) -> bool:
        """Whether writes to this inbox join ``store``'s transactions (same database)."""
        return getattr(store, "db", None) is self.db

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """Return the live entry for ``(scope, key)``, or ``None``."""
        rows = self.db.query(
            "SELECT fingerprint, receipt, expires_at FROM xsm_inbox WHERE scope = ? AND key = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (scope, key, time.time()),
        )
        return InboxEntry(*rows[0]) if rows else None

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Record ``(scope, key)`` in flight unless a live entry exists; return whether it won."""
        now = time.time()
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM xsm_inbox WHERE scope = ? AND key = ? AND expires_at <= ?",
                (scope, key, now),
            )
            cursor = conn.execute(
                "INSERT OR IGNORE INTO xsm_inbox (scope, key, fingerprint, receipt, expires_at) "
                "VALUES (?, ?, ?, NULL, ?)",
                (scope, key, fingerprint, expiry_time(ttl_s, now)),
            )
            return cursor.rowcount == 1

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of ``(scope, key)``."""
        self.db.write(
            "INSERT INTO xsm_inbox (scope, key, fingerprint, receipt, expires_at) "
            "VALUES (?, ?, '', ?, ?) ON CONFLICT(scope, key) DO UPDATE SET "
            "receipt = excluded.receipt, expires_at = excluded.expires_at",
            (scope, key, receipt, expiry_time(ttl_s, time.time())),
        )

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim; a completed entry is kept."""
        self.db.write(
            "DELETE FROM xsm_inbox WHERE scope = ? AND key = ? AND receipt IS NULL", (scope, key)
        )

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired entries; return how many."""
        when = time.time() if now is None else now
        return self.db.write("DELETE FROM xsm_inbox WHERE expires_at <= ?", (when,)).rowcount

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many."""
        return self.db.write("DELETE FROM xsm_inbox WHERE scope = ?", (scope,)).rowcount
