"""``DjangoInbox``: processed idempotency keys in the app's table.

A claim is an insert guarded by the ``(scope, key)`` unique constraint, so two consumers
racing for one key cannot both win; an expired entry is taken over with a compare-and-set
``UPDATE`` for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import Q

from xsm_celery.django.stores.base import DjangoStoreBase
from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import store_errors
from xsm_celery.persistence.inbox import expiry_time
from xsm_celery.persistence.protocols import InboxEntry

if TYPE_CHECKING:
    from xsm_celery.django.models import InboxRecord

__all__ = ["DjangoInbox"]


class DjangoInbox(DjangoStoreBase):
    """The ``Inbox`` protocol over ``InboxRecord`` rows.

    An entry is live while ``expires_at`` is empty or later than now; an expired entry
    behaves as if it were absent and can be claimed again.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` when None.
        wall: Epoch-seconds clock for expiry.
    """

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """The live entry for ``(scope, key)``, or None if unseen or expired."""
        now = self._wall()
        rows = _model().objects.using(self.using).filter(_live(now), scope=scope, key=key)
        with store_errors("get", self.using):
            row = rows.first()
        if row is None:
            return None
        return InboxEntry(row.fingerprint, row.receipt, row.expires_at)

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Record ``(scope, key)`` as in flight; True only for the caller that won."""
        now = self._wall()
        expires = expiry_time(ttl_s, now)
        model = _model()
        with store_errors("claim", self.using):
            try:
                with transaction.atomic(using=self.using):
                    model.objects.using(self.using).create(
                        scope=scope,
                        key=key,
                        fingerprint=fingerprint,
                        receipt=None,
                        expires_at=expires,
                        created=to_datetime(now),
                    )
                return True
            except IntegrityError:
                taken = (
                    model.objects.using(self.using)
                    .filter(scope=scope, key=key, expires_at__lte=now)
                    .update(
                        fingerprint=fingerprint,
                        receipt=None,
                        expires_at=expires,
                        created=to_datetime(now),
                    )
                )
                return bool(taken)

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of a key; later claims are answered with it."""
        now = self._wall()
        values = {"receipt": receipt, "expires_at": expiry_time(ttl_s, now)}
        model = _model()
        with store_errors("mark", self.using), transaction.atomic(using=self.using):
            updated = model.objects.using(self.using).filter(scope=scope, key=key).update(**values)
            if not updated:
                model.objects.using(self.using).create(
                    scope=scope, key=key, fingerprint="", created=to_datetime(now), **values
                )

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim so a redelivery can claim again; receipts are kept."""
        rows = _model().objects.using(self.using).filter(scope=scope, key=key, receipt__isnull=True)
        with store_errors("release", self.using):
            rows.delete()

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete entries expired at ``now`` (the wall clock by default); return how many."""
        at = self._wall() if now is None else now
        rows = _model().objects.using(self.using).filter(expires_at__lte=at)
        with store_errors("purge_expired", self.using):
            deleted, _ = rows.delete()
        return deleted

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many."""
        with store_errors("forget", self.using):
            deleted, _ = _model().objects.using(self.using).filter(scope=scope).delete()
        return deleted

    def __len__(self) -> int:
        with store_errors("count", self.using):
            return int(_model().objects.using(self.using).count())


def _model() -> type[InboxRecord]:
    from xsm_celery.django.models import InboxRecord

    return InboxRecord


def _live(now: float) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)
