"""The ``DeadLetter`` record and the in-memory ``DeadLetterStore``.

A dead letter is what an operator needs to triage or replay work that gave up: which
machine, in which state, handling which event, after how many attempts, failing how, and
a redacted snapshot to resume from. The record is plain JSON data so every store (memory,
SQLite, SQLAlchemy, Django) and every broker sink can keep it unchanged, and the same
record shape serves chart dead letters, poison envelopes and exhausted Celery tasks.
"""

from __future__ import annotations

import builtins
import enum
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

from xsm_celery.checks import positive_int
from xsm_celery.errors import ArgumentTypeError, ConfigurationError
from xsm_celery.ids import new_id

__all__ = [
    "PURGE_SCAN_LIMIT",
    "DeadLetter",
    "DeadLetterReason",
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


class DeadLetterReason(str, enum.Enum):
    """Why a record was written; stored as its string value."""

    DEAD_LETTER_STATE = "dead_letter_state"
    MAX_ATTEMPTS = "max_attempts"
    UNKNOWN_EVENT = "unknown_event"
    CORRUPT = "corrupt"
    TASK_EXHAUSTED = "task_exhausted"
    NON_RETRYABLE = "non_retryable"
    WORKER_LOST = "worker_lost"
    INSTANCE_DONE = "instance_done"
    IDEMPOTENCY_MISMATCH = "idempotency_mismatch"
    DEFERRED_TOO_LONG = "deferred_too_long"
    #: A store refused a value the envelope carried (too long, over the snapshot cap).
    STORE_REFUSED = "store_refused"
    #: A chart task's attempt was killed by Celery's hard ``time_limit``, every attempt.
    TIME_LIMIT = "time_limit"


def _reason_value(value: str | DeadLetterReason) -> str:
    """The reason's string value; an unknown reason is refused with the valid ones listed."""
    try:
        return DeadLetterReason(value).value
    except ValueError:
        choices = ", ".join(repr(r.value) for r in DeadLetterReason)
        raise ConfigurationError(f"reason must be one of {choices}, got {value!r}") from None


@dataclass(frozen=True)
class DeadLetter:
    """One unit of work that gave up, with the context needed to triage or replay it.

    ``errors`` is oldest first, each ``{source, name, type, message}``; ``snapshot`` is the
    redacted machine snapshot (``{}`` when left out); ``taken_at`` and ``resolved_at`` are
    epoch seconds. The ``task_*`` and ``hostname`` fields are set for Celery tasks only,
    ``envelope`` and ``topic`` for event envelopes only.
    """

    machine_id: str
    state_id: str
    event: dict[str, Any]
    attempts: int | None
    errors: list[dict[str, str]]
    snapshot: dict[str, Any]
    taken_at: float
    id: str = field(default_factory=new_id)
    reason: str = DeadLetterReason.DEAD_LETTER_STATE.value
    envelope: dict[str, Any] | None = None
    topic: str | None = None
    machine_hash: str | None = None
    machine_version: str | None = None
    resolved_at: float | None = None
    task_name: str | None = None
    task_id: str | None = None
    task_args: list[Any] | None = None
    task_kwargs: dict[str, Any] | None = None
    hostname: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", _reason_value(self.reason))
        if not isinstance(self.id, str) or not self.id:
            raise ConfigurationError(f"id must be a non-empty string, got {self.id!r}")

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain data, every field present."""
        return asdict(self)

    def to_json(self) -> str:
        """The record as JSON; a value JSON cannot carry is written as its ``str()``."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str, ensure_ascii=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeadLetter:
        """Rebuild a record from ``to_dict()`` output; unknown keys are ignored.

        Unknown keys are ignored so that a record written by a newer version still loads.

        Raises:
            ValueError: A required field is missing or the reason is unknown.
        """
        if not isinstance(raw, Mapping):
            raise ConfigurationError(
                f"a dead letter must be a JSON object, got {type(raw).__name__}"
            )
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in names}
        missing = sorted(
            f.name for f in fields(cls) if f.name not in values and _is_required(f.name)
        )
        if missing:
            raise ConfigurationError(f"dead letter is missing field(s) {', '.join(missing)}")
        values["taken_at"] = float(values["taken_at"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> DeadLetter:
        """Rebuild a record from ``to_json()`` output.

        Raises:
            ValueError: The text is not JSON or not a dead letter.
        """
        return cls.from_dict(json.loads(text))


_REQUIRED = frozenset(
    {"machine_id", "state_id", "event", "attempts", "errors", "snapshot", "taken_at"}
)


def _is_required(name: str) -> bool:
    return name in _REQUIRED


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
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
    return limit


def check_cutoff(cutoff_wall: float) -> float:
    """Return ``cutoff_wall`` as a float; NaN is refused because it would match every row.

    Every comparison with NaN is false, so ``keep if taken_at >= cutoff`` would keep
    nothing: one bad ``now - retention`` computation would empty the store.
    """
    if isinstance(cutoff_wall, bool) or not isinstance(cutoff_wall, int | float):
        raise ConfigurationError(f"cutoff_wall must be epoch seconds, got {cutoff_wall!r}")
    cutoff = float(cutoff_wall)
    if math.isnan(cutoff):
        raise ConfigurationError("cutoff_wall is NaN; pass epoch seconds (time.time() - retention)")
    return cutoff


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

    def audit(
        self, record_id: str, action: str, *, actor: str, reason: str, outcome: str
    ) -> None:
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
