"""``DjangoOutboxStore``: the transactional outbox in the app's table, with relay leases.

``add()`` is a plain insert, so inside ``transaction.atomic()`` (or a
``DjangoSnapshotStore.lock()`` block, which opens one) the row commits or rolls back with
the state change it announces. Leases are taken with a compare-and-set ``UPDATE`` that
re-checks the lease in its ``WHERE`` clause, which is safe on every database Django
supports, with or without row locks.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import connections, transaction
from django.db.models import F, Q

from xsm_celery.django.stores.base import DjangoStoreBase
from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import store_errors
from xsm_celery.eda.outbox_protocols import FailedOutboxRecord, OutboxRecord
from xsm_celery.eda.outbox_store import check_refusal
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from xsm_celery.django.models import OutboxMessage
    from xsm_celery.eda.envelope import Envelope

__all__ = ["DjangoOutboxStore"]


class DjangoOutboxStore(DjangoStoreBase):
    """The ``OutboxStore`` protocol over ``OutboxMessage`` rows.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` when None. Give the snapshot
            store the same alias so both write in one transaction.
        wall: Epoch-seconds clock for creation, sending and lease times.
    """

    def add(self, topic: str, envelope: Envelope) -> int:
        """Append a row for ``envelope`` on ``topic`` and return its sequence number."""
        now = self._wall()
        with store_errors("add", self.using):
            row = (
                _model()
                .objects.using(self.using)
                .create(
                    topic=topic,
                    envelope_id=envelope.id,
                    event_type=envelope.type,
                    subject=envelope.subject,
                    envelope=envelope.to_json(),
                    created_at=now,
                    created=to_datetime(now),
                )
            )
        return int(row.seq)

    def pending(self, limit: int = 100) -> builtins.list[OutboxRecord]:
        """Up to ``limit`` unsent rows in sequence order, leased or not."""
        rows = self._pending().order_by("seq")
        with store_errors("pending", self.using):
            return [_record(row) for row in rows[: _limit(limit)]]

    def claim(
        self, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> builtins.list[OutboxRecord]:
        """Lease up to ``limit`` unsent rows to ``owner`` for ``lease_s`` seconds.

        Rows under another owner's live lease are skipped; rows already leased to
        ``owner`` come back again, so a restarted relay reclaims its own rows at once.
        """
        if not owner:
            raise ConfigurationError("owner must be a non-empty string naming the relay")
        if not lease_s > 0:
            raise ConfigurationError(
                f"lease_s must be a positive number of seconds, got {lease_s!r}"
            )
        now = self._wall()
        until = now + lease_s
        free = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now) | Q(claimed_by=owner)
        rows = self._pending().filter(free)
        with store_errors("claim", self.using), transaction.atomic(using=self.using):
            candidates = rows.order_by("seq")
            if connections[self.using].features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            seqs = builtins.list(candidates.values_list("seq", flat=True)[: _limit(limit)])
            rows.filter(seq__in=seqs).update(claimed_by=owner, claimed_until=until)
            won = (
                _model()
                .objects.using(self.using)
                .filter(seq__in=seqs, claimed_by=owner, claimed_until=until)
            )
            return [_record(row) for row in won.order_by("seq")]

    def release(self, seqs: Iterable[int], owner: str) -> int:
        """Hand back ``owner``'s leases on ``seqs``; return how many were released."""
        rows = (
            _model()
            .objects.using(self.using)
            .filter(seq__in=builtins.list(seqs), claimed_by=owner, sent_at__isnull=True)
        )
        with store_errors("release", self.using):
            return int(rows.update(claimed_by=None, claimed_until=None))

    def mark_sent(self, seqs: Iterable[int]) -> int:
        """Mark rows as published (dropping their lease); return how many changed."""
        rows = (
            _model()
            .objects.using(self.using)
            .filter(seq__in=builtins.list(seqs), sent_at__isnull=True)
        )
        with store_errors("mark_sent", self.using):
            return int(rows.update(sent_at=self._wall(), claimed_by=None, claimed_until=None))

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        if not older_than_s >= 0:
            raise ConfigurationError(f"older_than_s must be >= 0 seconds, got {older_than_s!r}")
        cutoff = self._wall() - older_than_s
        rows = _model().objects.using(self.using).filter(sent_at__lt=cutoff)
        with store_errors("purge_sent", self.using):
            deleted, _ = rows.delete()
        return deleted

    def count(self, *, pending_only: bool = False, failed_only: bool = False) -> int:
        """How many rows the outbox holds (only pending or only failed ones if asked)."""
        rows = _model().objects.using(self.using)
        if failed_only:
            rows = self._failed()
        elif pending_only:
            rows = self._pending()
        with store_errors("count", self.using):
            return int(rows.count())

    def record_refusal(self, seq: int, owner: str, error: str, *, max_attempts: int) -> int:
        """Count one refusal of ``owner``'s row ``seq``; fail it at ``max_attempts``.

        The count is an ``UPDATE ... SET attempts = attempts + 1`` that re-checks the lease,
        so two relays never both count one refusal.
        """
        text = check_refusal(owner, error, max_attempts)
        now = self._wall()
        mine = self._pending().filter(seq=seq, claimed_by=owner)
        with store_errors("record_refusal", self.using), transaction.atomic(using=self.using):
            if not mine.update(
                attempts=F("attempts") + 1, last_error=text, claimed_by=None, claimed_until=None
            ):
                return 0
            rows = _model().objects.using(self.using).filter(seq=seq)
            attempts = int(rows.values_list("attempts", flat=True)[0])
            if attempts >= max_attempts:
                rows.update(failed_at=now)
        return attempts

    def failed(self, limit: int = 100) -> builtins.list[FailedOutboxRecord]:
        """Up to ``limit`` failed rows in sequence order."""
        rows = self._failed().order_by("seq")
        with store_errors("failed", self.using):
            return [_failed_record(row) for row in rows[: _limit(limit)]]

    def requeue(self, seq: int) -> bool:
        """Make failed row ``seq`` pending again with its attempts reset."""
        with store_errors("requeue", self.using):
            return bool(self._failed().filter(seq=seq).update(attempts=0, failed_at=None))

    def _pending(self) -> QuerySet[OutboxMessage]:
        """Rows the relay may publish: not sent, not set aside as failed."""
        return (
            _model().objects.using(self.using).filter(sent_at__isnull=True, failed_at__isnull=True)
        )

    def _failed(self) -> QuerySet[OutboxMessage]:
        """Rows set aside after ``max_attempts`` refusals and not sent by hand since."""
        return (
            _model().objects.using(self.using).filter(sent_at__isnull=True, failed_at__isnull=False)
        )

    def oldest_pending_at(self) -> float | None:
        """When the oldest pending row was added (epoch s), or None when none waits."""
        from django.db.models import Min

        rows = self._pending()
        with store_errors("oldest_pending_at", self.using):
            value = rows.aggregate(oldest=Min("created_at"))["oldest"]
        return None if value is None else float(value)


def _model() -> type[OutboxMessage]:
    from xsm_celery.django.models import OutboxMessage

    return OutboxMessage


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
    return limit


def _failed_record(row: OutboxMessage) -> FailedOutboxRecord:
    seq, topic, envelope = _record(row)
    error = row.last_error or ""
    return FailedOutboxRecord(
        seq, topic, envelope, int(row.attempts), error, float(row.failed_at or 0.0)
    )


def _record(row: OutboxMessage) -> OutboxRecord:
    from xsm_celery.eda.envelope import Envelope

    return OutboxRecord(int(row.seq), row.topic, Envelope.from_json(row.envelope))
