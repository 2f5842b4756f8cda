"""``DjangoTimerStore``: durable ``after`` timers in the app's table, with scanner leases."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import Q

from xsm_celery.django.stores.base import DjangoStoreBase
from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import store_errors
from xsm_celery.errors import ConfigurationError
from xsm_celery.ids import new_id
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S, DueTimer

if TYPE_CHECKING:
    from xsm_celery.django.models import DurableTimer

__all__ = ["DjangoTimerStore"]


class DjangoTimerStore(DjangoStoreBase):
    """The ``TimerStore`` protocol over ``DurableTimer`` rows.

    Leases work as the outbox's do: a compare-and-set ``UPDATE`` re-checks the lease, so
    two scanners never fire one timer at the same time.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` when None.

    Leases are measured against the ``now`` the caller passes, like due times, so a scanner
    driven by a simulated clock stays consistent.
    """

    def schedule(self, key: str, due_at_wall: float, payload: dict[str, Any]) -> str:
        """Store a timer for instance ``key`` due at ``due_at_wall``; return its id."""
        if isinstance(due_at_wall, bool) or not isinstance(due_at_wall, int | float):
            raise ConfigurationError(f"due_at_wall must be epoch seconds, got {due_at_wall!r}")
        if not math.isfinite(due_at_wall):
            raise ConfigurationError(
                f"due_at_wall must be finite epoch seconds, got {due_at_wall!r}"
            )
        timer_id = new_id()
        with store_errors("schedule", self.using):
            _model().objects.using(self.using).create(
                id=timer_id,
                key=key,
                due_at=float(due_at_wall),
                due=to_datetime(float(due_at_wall)),
                payload=payload,
            )
        return timer_id

    def due(self, now: float, limit: int = 100) -> builtins.list[DueTimer]:
        """Up to ``limit`` timers due at ``now`` or earlier, earliest first."""
        rows = _model().objects.using(self.using).filter(due_at__lte=now).order_by("due_at", "id")
        with store_errors("due", self.using):
            return [_timer(row) for row in rows[: _limit(limit)]]

    def claim(
        self, now: float, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> builtins.list[DueTimer]:
        """Lease up to ``limit`` due timers to ``owner`` for ``lease_s`` seconds.

        Timers under another owner's live lease are skipped; those already leased to
        ``owner`` come back again.
        """
        if not owner:
            raise ConfigurationError("owner must be a non-empty string naming the scanner")
        if not lease_s > 0:
            raise ConfigurationError(
                f"lease_s must be a positive number of seconds, got {lease_s!r}"
            )
        until = now + lease_s
        free = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now) | Q(claimed_by=owner)
        rows = _model().objects.using(self.using).filter(free, due_at__lte=now)
        with store_errors("claim", self.using), transaction.atomic(using=self.using):
            candidates = rows.order_by("due_at", "id")
            if connections[self.using].features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            ids = builtins.list(candidates.values_list("id", flat=True)[: _limit(limit)])
            rows.filter(id__in=ids).update(claimed_by=owner, claimed_until=until)
            won = (
                _model()
                .objects.using(self.using)
                .filter(id__in=ids, claimed_by=owner, claimed_until=until)
            )
            return [_timer(row) for row in won.order_by("due_at", "id")]

    def release(self, ids: Sequence[str], owner: str) -> int:
        """Hand back ``owner``'s leases on ``ids``; return how many were released."""
        rows = (
            _model().objects.using(self.using).filter(id__in=builtins.list(ids), claimed_by=owner)
        )
        with store_errors("release", self.using):
            return int(rows.update(claimed_by=None, claimed_until=None))

    def delete(self, timer_id: str) -> bool:
        """Remove one timer (it fired or was cancelled); return whether it existed."""
        with store_errors("delete", self.using):
            deleted, _ = _model().objects.using(self.using).filter(id=timer_id).delete()
        return deleted > 0

    def postpone(self, timer_id: str, due_at_wall: float) -> bool:
        """Move one timer to ``due_at_wall`` and free its lease; return whether it exists."""
        with store_errors("postpone", self.using):
            changed = (
                _model()
                .objects.using(self.using)
                .filter(id=timer_id)
                .update(
                    due_at=float(due_at_wall),
                    due=to_datetime(float(due_at_wall)),
                    claimed_by=None,
                    claimed_until=None,
                )
            )
        return changed > 0

    def delete_key(self, key: str) -> int:
        """Remove every timer of instance ``key``; return how many."""
        with store_errors("delete_key", self.using):
            deleted, _ = _model().objects.using(self.using).filter(key=key).delete()
        return deleted

    def count(self) -> int:
        """How many timers are stored, due or not."""
        with store_errors("count", self.using):
            return int(_model().objects.using(self.using).count())

    def earliest_due_at(self) -> float | None:
        """The due time of the earliest stored timer (epoch s), or None when there is none."""
        from django.db.models import Min

        with store_errors("earliest_due_at", self.using):
            value = _model().objects.using(self.using).aggregate(first=Min("due_at"))["first"]
        return None if value is None else float(value)


def _model() -> type[DurableTimer]:
    from xsm_celery.django.models import DurableTimer

    return DurableTimer


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
    return limit


def _timer(row: DurableTimer) -> DueTimer:
    return DueTimer(row.id, row.key, row.due_at, dict(row.payload or {}))
