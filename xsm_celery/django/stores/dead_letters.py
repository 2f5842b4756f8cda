"""``DjangoDeadLetterStore``: dead letters in the app's tables, through the ORM.

Records are redacted again on write, as the SQL stores do: a record may have been built by
hand or by an older writer, and the table outlives both; what the table holds is what the
admin shows.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import store_errors
from xsm_celery.errors import ArgumentTypeError
from xsm_celery.patterns.dead_letter import DeadLetter, check_cutoff, check_limit
from xsm_celery.patterns.dead_letter.redaction import plain_json, redact_record

if TYPE_CHECKING:
    from xsm_celery.django.models import DeadLetterRecord

__all__ = ["DjangoDeadLetterStore", "record_to_row", "row_to_record"]

_LAST_ERROR_MAX = 500


class DjangoDeadLetterStore:
    """The ``DeadLetterStore`` protocol over ``DeadLetterRecord`` and ``AuditEntry`` rows.

    It needs no arguments, so a Celery setting of ``xsm_dead_letter_store = "django"`` can
    build it; the database alias comes from ``XSM_CELERY["DATABASE"]`` when not given, read
    on each call so it is never fixed at import.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` (default ``"default"``) when None.
        redact_keys: Keys masked on write besides the engine's defaults and
            ``XSM_CELERY["REDACT_KEYS"]``.
        wall: Epoch-seconds clock for ``resolved_at`` and audit times.

    Raises:
        StoreUnavailableError: from any method, when the database cannot be reached.
        StoreError: from any method, when the database refuses the statement.
    """

    def __init__(
        self,
        using: str | None = None,
        *,
        redact_keys: Iterable[str] = (),
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._using = using
        self._extra_keys = tuple(redact_keys)
        self._wall = wall

    def __repr__(self) -> str:
        return f"DjangoDeadLetterStore(using={self._using!r})"

    @property
    def using(self) -> str:
        """The database alias this store reads and writes."""
        if self._using is not None:
            return self._using
        from xsm_celery.django.conf import get_settings

        return get_settings().database

    def __call__(self, record: DeadLetter) -> str:
        """Store ``record``: a store is a sink."""
        return self.put(record)

    def put(self, record: DeadLetter) -> str:
        """Store ``record`` (replacing one with the same id) and return its id."""
        if not isinstance(record, DeadLetter):
            raise ArgumentTypeError(f"put() takes a DeadLetter, got {type(record).__name__}")
        values = record_to_row(self._redact(record))
        with store_errors("put", self.using), transaction.atomic(using=self.using):
            _records().objects.using(self.using).update_or_create(id=record.id, defaults=values)
        return record.id

    def get(self, record_id: str) -> DeadLetter | None:
        """The record with ``record_id``, or None."""
        with store_errors("get", self.using):
            row = _records().objects.using(self.using).filter(id=record_id).first()
        return None if row is None else row_to_record(row)

    def list(self, limit: int = 100, include_resolved: bool = False) -> builtins.list[DeadLetter]:
        """Up to ``limit`` records, newest first (by ``taken_at``, then id).

        Raises:
            ValueError: ``limit`` is negative or not an integer.
        """
        check_limit(limit)
        if limit == 0:
            return []
        rows = _records().objects.using(self.using).order_by("-taken_at", "-id")
        if not include_resolved:
            rows = rows.filter(resolved_at__isnull=True)
        with store_errors("list", self.using):
            return [row_to_record(row) for row in rows[:limit]]

    def all(self) -> builtins.list[DeadLetter]:
        """Every record, resolved or not, oldest first."""
        rows = _records().objects.using(self.using).order_by("taken_at", "id")
        with store_errors("all", self.using):
            return [row_to_record(row) for row in rows]

    def count(self, include_resolved: bool = False) -> int:
        """How many records there are (open ones only unless ``include_resolved``)."""
        rows = _records().objects.using(self.using)
        if not include_resolved:
            rows = rows.filter(resolved_at__isnull=True)
        with store_errors("count", self.using):
            return int(rows.count())

    def count_by_reason(self, since_wall: float) -> dict[str, int]:
        """How many records were taken at or after ``since_wall`` (epoch s), per reason."""
        from django.db.models import Count

        rows = (
            _records()
            .objects.using(self.using)
            .filter(taken_at__gte=float(since_wall))
            .order_by()
            .values("reason")
            .annotate(n=Count("id"))
        )
        with store_errors("count_by_reason", self.using):
            return {str(row["reason"]): int(row["n"]) for row in rows}

    def mark_resolved(self, record_id: str, resolved_at: float | None = None) -> bool:
        """Mark a record resolved; False when there is no such record."""
        when = self._wall() if resolved_at is None else check_cutoff(resolved_at)
        rows = _records().objects.using(self.using).filter(id=record_id)
        with store_errors("mark_resolved", self.using):
            return bool(rows.update(resolved_at=when) > 0)

    def delete(self, record_id: str) -> bool:
        """Remove a record; False when there is no such record."""
        with store_errors("delete", self.using):
            deleted, _ = _records().objects.using(self.using).filter(id=record_id).delete()
        return deleted > 0

    def purge_older_than(self, cutoff_wall: float) -> int:
        """Remove records taken before ``cutoff_wall`` (epoch seconds); return how many.

        Raises:
            ValueError: ``cutoff_wall`` is NaN or not a number.
        """
        cutoff = check_cutoff(cutoff_wall)
        rows = _records().objects.using(self.using).filter(taken_at__lt=cutoff)
        with store_errors("purge_older_than", self.using):
            deleted, _ = rows.delete()
        return deleted

    def audit(self, record_id: str, action: str, *, actor: str, reason: str, outcome: str) -> None:
        """Append one operator action (replay, resolve, purge) to the audit table."""
        from xsm_celery.django.models import AuditEntry

        at = self._wall()
        with store_errors("audit", self.using):
            AuditEntry.objects.using(self.using).create(
                record_id=record_id,
                action=action,
                actor=actor,
                reason=reason,
                outcome=outcome,
                at=at,
                created=to_datetime(at),
            )

    def audit_log(self, record_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Audit entries, oldest first; only those of ``record_id`` when given."""
        from xsm_celery.django.models import AuditEntry

        rows = AuditEntry.objects.using(self.using).order_by("id")
        if record_id is not None:
            rows = rows.filter(record_id=record_id)
        with store_errors("audit_log", self.using):
            entries = builtins.list(rows)
        return [
            {
                "record_id": row.record_id,
                "action": row.action,
                "actor": row.actor,
                "reason": row.reason,
                "outcome": row.outcome,
                "at": row.at,
            }
            for row in entries
        ]

    def _redact(self, record: DeadLetter) -> DeadLetter:
        from xsm_celery.django.conf import get_settings
        from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS

        keys = (*DEFAULT_REDACT_KEYS, *get_settings().redact_keys, *self._extra_keys)

        return DeadLetter.from_dict(plain_json(redact_record(record, keys).to_dict()))


def _records() -> type[DeadLetterRecord]:
    """The model class, imported late so this module loads before the app registry."""
    from xsm_celery.django.models import DeadLetterRecord

    return DeadLetterRecord


def record_to_row(record: DeadLetter) -> dict[str, Any]:
    """Column values for ``record``, including the derived search and filter columns."""
    values = record.to_dict()
    values.pop("id")
    errors = record.errors or []
    last = errors[-1] if errors else None
    envelope = record.envelope or {}
    subject = envelope.get("subject") if isinstance(envelope, dict) else None
    values.update(
        taken_on=to_datetime(record.taken_at),
        last_error=_describe(last)[:_LAST_ERROR_MAX] if last else "",
        error_text="\n".join(_describe(e) for e in errors),
        subject=str(subject)[:255] if subject else None,
    )
    return values


def row_to_record(row: DeadLetterRecord) -> DeadLetter:
    """The ``DeadLetter`` a ``DeadLetterRecord`` row holds."""
    return DeadLetter(
        id=row.id,
        machine_id=row.machine_id,
        state_id=row.state_id,
        event=row.event,
        attempts=row.attempts,
        errors=row.errors,
        snapshot=row.snapshot,
        taken_at=row.taken_at,
        reason=row.reason,
        envelope=row.envelope,
        topic=row.topic,
        machine_hash=row.machine_hash,
        machine_version=row.machine_version,
        resolved_at=row.resolved_at,
        task_name=row.task_name,
        task_id=row.task_id,
        task_args=row.task_args,
        task_kwargs=row.task_kwargs,
        hostname=row.hostname,
    )


def _describe(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    kind = entry.get("type") or "Error"
    return f"{kind}: {entry.get('message', '')}"
