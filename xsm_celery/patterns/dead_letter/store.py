"""The in-memory ``DeadLetterStore`` and what every dead-letter store shares.

``DeadLetterStoreProtocol`` is the shape the memory, SQLite, SQLAlchemy and Django stores
all offer; ``check_limit`` and ``check_cutoff`` are the argument checks they all apply, so
a NaN cutoff or a negative limit is refused with the same sentence by every one of them.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from xsm_celery.checks import EPOCH_SECONDS, non_negative_int, positive_int
from xsm_celery.errors import ArgumentTypeError
from xsm_celery.patterns.dead_letter.record import DeadLetter

__all__ = [
    "PURGE_SCAN_LIMIT",
    "DeadLetterSink",
    "DeadLetterStore",
    "DeadLetterStoreProtocol",
    "MemoryDeadLetterStore",
    "check_cutoff",
    "check_limit",
    "purge_resolved_older_than",
]

logger = logging.getLogger(__name__)

#: Records an in-memory store keeps before it evicts the oldest one.
DEFAULT_MAX_RECORDS = 100_000

#: Audit entries an in-memory store keeps (oldest dropped first).
DEFAULT_MAX_AUDIT = 100_000


#: Anything a ``DeadLetterPlugin`` can write to: a callable taking one ``DeadLetter``.
DeadLetterSink = Callable[[DeadLetter], object]


@runtime_checkable
class DeadLetterStoreProtocol(Protocol):
    """What every dead-letter store offers (memory, SQLite, SQLAlchemy, Django)."""

    def __call__(self, record: DeadLetter) -> object: ...

    def put(self, record: DeadLetter) -> str: ...

    def get(self, record_id: str) -> DeadLetter | None: ...

    def list(
        self, limit: int = 100, include_resolved: bool = False
    ) -> builtins.list[DeadLetter]: ...

    def all(self) -> builtins.list[DeadLetter]: ...

    def mark_resolved(self, record_id: str, resolved_at: float | None = None) -> bool: ...

    def delete(self, record_id: str) -> bool: ...

    def purge_older_than(self, cutoff_wall: float) -> int: ...

    def audit(
        self, record_id: str, action: str, *, actor: str, reason: str, outcome: str
    ) -> None: ...

    def audit_log(self, record_id: str | None = None) -> builtins.list[dict[str, Any]]: ...


def check_limit(limit: int) -> int:
    """Return ``limit`` if it is a usable row limit; shared by every store."""
    return non_negative_int("limit", limit)


def check_cutoff(cutoff_wall: float) -> float:
    """Return ``cutoff_wall`` as a float; NaN is refused because it would match every row.

    Every comparison with NaN is false, so ``keep if taken_at >= cutoff`` would keep
    nothing: one bad ``now - retention`` computation would empty the store.
    """
    return EPOCH_SECONDS.require("cutoff_wall", cutoff_wall)


class DeadLetterStore:
    """Thread-safe in-memory dead-letter store, also usable directly as a sink.

    Records are kept in insertion order in a dict keyed by id, so ``put`` is O(1); a record
    put again with the same id replaces the old one. The store is bounded: past
    ``max_records`` the oldest record is evicted (and logged), because an unbounded store
    in a long-lived worker is a memory leak that only shows in production.

    Args:
        max_records: Records kept before the oldest is evicted.
        max_audit: Audit entries kept.
        wall: The epoch-seconds clock for ``resolved_at`` and audit times.
    """

    def __init__(
        self,
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_audit: int = DEFAULT_MAX_AUDIT,
        wall: Callable[[], float] = time.time,
    ) -> None:
        for name, value in (("max_records", max_records), ("max_audit", max_audit)):
            positive_int(name, value)
        self.max_records = max_records
        self._wall = wall
        self._records: dict[str, DeadLetter] = {}
        self._audit: deque[dict[str, Any]] = deque(maxlen=max_audit)
        self._lock = threading.Lock()

    def __call__(self, record: DeadLetter) -> str:
        """Store ``record``: a store is a sink."""
        return self.put(record)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def put(self, record: DeadLetter) -> str:
        """Store ``record`` (replacing one with the same id) and return its id."""
        if not isinstance(record, DeadLetter):
            raise ArgumentTypeError(f"put() takes a DeadLetter, got {type(record).__name__}")
        evicted: DeadLetter | None = None
        with self._lock:
            self._records.pop(record.id, None)
            self._records[record.id] = record
            if len(self._records) > self.max_records:
                evicted = self._records.pop(next(iter(self._records)))
        if evicted is not None:
            logger.warning(
                "dead-letter store full (%d records); evicted the oldest record %s (%s @ %s)",
                self.max_records,
                evicted.id,
                evicted.machine_id,
                evicted.state_id,
            )
        return record.id

    def get(self, record_id: str) -> DeadLetter | None:
        """The record with ``record_id``, or None."""
        with self._lock:
            return self._records.get(record_id)

    def list(self, limit: int = 100, include_resolved: bool = False) -> builtins.list[DeadLetter]:
        """Up to ``limit`` records, newest first (by ``taken_at``, then id).

        Raises:
            ValueError: ``limit`` is negative or not an integer.
        """
        check_limit(limit)
        with self._lock:
            rows = [r for r in self._records.values() if include_resolved or r.resolved_at is None]
        rows.sort(key=lambda r: (r.taken_at, r.id), reverse=True)
        return rows[:limit]

    def all(self) -> builtins.list[DeadLetter]:
        """Every record, resolved or not, oldest first (insertion order)."""
        with self._lock:
            return builtins.list(self._records.values())

    def count_by_reason(self, since_wall: float) -> dict[str, int]:
        """How many records were taken at or after ``since_wall`` (epoch s), per reason."""
        counts: dict[str, int] = {}
        with self._lock:
            for record in self._records.values():
                if record.taken_at >= since_wall:
                    counts[record.reason] = counts.get(record.reason, 0) + 1
        return counts

    def mark_resolved(self, record_id: str, resolved_at: float | None = None) -> bool:
        """Mark a record resolved; False when there is no such record."""
        when = self._wall() if resolved_at is None else check_cutoff(resolved_at)
        with self._lock:
            record = self._records.get(record_id)
            if record is None:
                return False
            self._records[record_id] = replace(record, resolved_at=when)
            return True

    def delete(self, record_id: str) -> bool:
        """Remove a record; False when there is no such record."""
        with self._lock:
            return self._records.pop(record_id, None) is not None

    def purge_older_than(self, cutoff_wall: float) -> int:
        """Remove records taken before ``cutoff_wall`` (epoch seconds); return how many.

        Raises:
            ValueError: ``cutoff_wall`` is NaN or not a number.
        """
        cutoff = check_cutoff(cutoff_wall)
        with self._lock:
            old = [key for key, r in self._records.items() if r.taken_at < cutoff]
            for key in old:
                del self._records[key]
        return len(old)

    def clear(self) -> None:
        """Remove every record (the audit log is kept)."""
        with self._lock:
            self._records.clear()

    def audit(self, record_id: str, action: str, *, actor: str, reason: str, outcome: str) -> None:
        """Append one operator action (replay, resolve, purge) to the audit log."""
        entry = {
            "record_id": record_id,
            "action": action,
            "actor": actor,
            "reason": reason,
            "outcome": outcome,
            "at": self._wall(),
        }
        with self._lock:
            self._audit.append(entry)

    def audit_log(self, record_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Audit entries, oldest first; only those of ``record_id`` when given."""
        with self._lock:
            entries = [dict(e) for e in self._audit]
        if record_id is None:
            return entries
        return [e for e in entries if e["record_id"] == record_id]


#: The name the event-driven documents use for the same in-memory store.
MemoryDeadLetterStore = DeadLetterStore


#: Most records ``purge_resolved_older_than`` looks at in one call.
PURGE_SCAN_LIMIT = 100_000


def purge_resolved_older_than(store: Any, cutoff_wall: float) -> int:
    """Delete the resolved records of ``store`` taken before ``cutoff_wall``; return how many.

    Unresolved records are kept: nobody has looked at them yet, so deleting them by age alone
    would lose work. ``store.purge_older_than`` deletes both, for an explicit request.
    """
    cutoff = check_cutoff(cutoff_wall)
    records = store.list(limit=PURGE_SCAN_LIMIT, include_resolved=True)
    old = [r.id for r in records if r.resolved_at is not None and r.taken_at < cutoff]
    return sum(1 for record_id in old if store.delete(record_id))
