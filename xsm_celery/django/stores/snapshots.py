"""``DjangoSnapshotStore``: machine snapshots in the app's table, with a transactional lock.

``lock(key)`` opens ``transaction.atomic()`` on the store's database and holds the key
exclusively inside it, so everything written in the block through the same alias (the
snapshot, ``DjangoOutboxStore`` rows, the user's own models) commits or rolls back
together. PostgreSQL takes a transaction-scoped advisory lock on the key; SQLite takes the
database write lock at once, since SQLite has no finer lock. ``workflow_family()`` opens the
inbox, timers, outbox and transition log of a workflow on the same alias.
"""

from __future__ import annotations

import builtins
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, OperationalError, connections, transaction
from django.db.models import F

from xsm_celery.django.stores.base import DjangoStoreBase
from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import is_missing_table, not_migrated, store_errors
from xsm_celery.django.stores.inbox import DjangoInbox
from xsm_celery.django.stores.outbox import DjangoOutboxStore
from xsm_celery.django.stores.timers import DjangoTimerStore
from xsm_celery.django.stores.workflows import DjangoWorkflowJournal
from xsm_celery.errors import ConfigurationError, ConflictError, LockTimeoutError
from xsm_celery.persistence.family import WorkflowStores
from xsm_celery.persistence.memory import DEFAULT_MAX_SNAPSHOT_BYTES, check_key, check_snapshot
from xsm_celery.persistence.protocols import StoredSnapshot

if TYPE_CHECKING:
    from xsm_celery.django.models import MachineSnapshot

__all__ = ["DjangoSnapshotStore"]


class DjangoSnapshotStore(DjangoStoreBase):
    """The ``StateStore`` protocol over ``MachineSnapshot`` rows.

    Keys and sizes follow the rules every snapshot store shares (``check_key``,
    ``check_snapshot``), so a key that works in memory works here.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` when None.
        max_bytes: Largest snapshot accepted, in UTF-8 bytes.
        wall: Epoch-seconds clock for ``updated_at``.
    """

    def __init__(
        self,
        using: str | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(using, wall=wall)
        self.max_bytes = max_bytes

    def workflow_family(self) -> WorkflowStores:
        """The inbox, timers, outbox and transition log on this store's alias.

        Their rows are written inside the ``atomic`` block of ``lock``, so they commit or roll
        back with the snapshot.
        """
        using = self._using
        return WorkflowStores(
            snapshots=self,
            inbox=DjangoInbox(using=using),
            timers=DjangoTimerStore(using=using),
            outbox=DjangoOutboxStore(using=using),
            journal=DjangoWorkflowJournal(using=using),
            description=f"django://{using}" if using else "django",
        )

    def load(self, key: str) -> StoredSnapshot | None:
        """The current record of ``key``, or None."""
        check_key(key)
        with store_errors("load", self.using):
            row = _model().objects.using(self.using).filter(key=key).first()
        if row is None:
            return None
        return StoredSnapshot(
            key=row.key,
            snapshot=row.snapshot,
            version=int(row.version),
            machine_version=row.machine_version,
            updated_at=row.updated_at,
        )

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot`` and return its new version.

        Raises:
            ConflictError: ``expected_version`` is given and is not the stored version
                (``0`` means the key must not exist yet); nothing is written.
        """
        check_key(key)
        check_snapshot(key, snapshot, self.max_bytes)
        now = self._wall()
        values = {
            "snapshot": snapshot,
            "machine_version": machine_version or "",
            "updated_at": now,
            "updated": to_datetime(now),
        }
        with store_errors("save", self.using), transaction.atomic(using=self.using):
            if expected_version is None:
                return self._upsert(key, values)
            if expected_version == 0:
                return self._insert(key, values, conflict=True)
            return self._compare_and_set(key, expected_version, values)

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""
        check_key(key)
        with store_errors("delete", self.using):
            deleted, _ = _model().objects.using(self.using).filter(key=key).delete()
        return deleted > 0

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> builtins.list[str]:
        """Up to ``limit`` keys starting with ``prefix``, sorted."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigurationError(f"limit must be an integer >= 0, got {limit!r}")
        rows = _model().objects.using(self.using).order_by("key")
        if prefix:
            rows = rows.filter(key__startswith=prefix)
        with store_errors("list_keys", self.using):
            return [str(k) for k in rows.values_list("key", flat=True)[:limit]]

    @contextmanager
    def lock(self, key: str, *, timeout: float = 10.0) -> Iterator[None]:
        """Hold ``key`` exclusively inside a transaction; an exception rolls it back.

        Raises:
            LockTimeoutError: the lock was not acquired within ``timeout`` seconds.
            StoreNotMigratedError: the table does not exist (``python manage.py migrate``).
        """
        check_key(key)
        with transaction.atomic(using=self.using):
            self._acquire(key, timeout)
            yield

    def _acquire(self, key: str, timeout: float) -> None:
        connection = connections[self.using]
        try:
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    cursor.execute("SET LOCAL lock_timeout = %s", [f"{int(timeout * 1000)}ms"])
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_id(key)])
                elif connection.vendor == "sqlite":
                    _sqlite_write_lock(cursor, _model()._meta.db_table, key, timeout)
                else:
                    builtins.list(
                        _model().objects.using(self.using).select_for_update().filter(key=key)
                    )
        except OperationalError as exc:
            if is_missing_table(exc):  # SQLite's write lock is an UPDATE of the table
                raise not_migrated("lock", self.using, exc) from exc
            raise LockTimeoutError(
                f"lock on {key!r} not acquired within {timeout} s ({exc}); another worker "
                "holds it: retry later or raise timeout"
            ) from exc

    def _upsert(self, key: str, values: dict[str, object]) -> int:
        """Last writer wins, but every save still adds exactly one to the version."""
        rows = _model().objects.using(self.using).filter(key=key)
        if not rows.update(version=F("version") + 1, **values):
            try:
                return self._insert(key, values, conflict=False)
            except IntegrityError:
                rows.update(version=F("version") + 1, **values)
        return int(rows.values_list("version", flat=True).get())

    def _insert(self, key: str, values: dict[str, object], *, conflict: bool) -> int:
        try:
            with transaction.atomic(using=self.using):
                _model().objects.using(self.using).create(key=key, version=1, **values)
        except IntegrityError as exc:
            if not conflict:
                raise
            raise _conflict(key, _model().objects.using(self.using), 0) from exc
        return 1

    def _compare_and_set(self, key: str, expected: int, values: dict[str, object]) -> int:
        rows = _model().objects.using(self.using).filter(key=key, version=expected)
        if rows.update(version=expected + 1, **values) == 1:
            return expected + 1
        raise _conflict(key, _model().objects.using(self.using), expected)


def _conflict(key: str, rows: Any, expected: int) -> ConflictError:
    current = rows.filter(key=key).values_list("version", flat=True).first() or 0
    return ConflictError(
        f"snapshot {key!r} is at version {current}, expected {expected}; another writer "
        "saved first: reload and retry"
    )


def _model() -> type[MachineSnapshot]:
    from xsm_celery.django.models import MachineSnapshot

    return MachineSnapshot


def _sqlite_write_lock(cursor: Any, table: str, key: str, timeout: float) -> None:
    """Take SQLite's write lock now (a no-op UPDATE does), waiting up to ``timeout``."""
    cursor.execute("PRAGMA busy_timeout")
    previous = int(cursor.fetchone()[0])
    cursor.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    try:
        cursor.execute(f'UPDATE "{table}" SET "version" = "version" WHERE "key" = %s', [key])
    finally:
        cursor.execute(f"PRAGMA busy_timeout = {previous}")


def _lock_id(key: str) -> int:
    """A signed 64-bit advisory-lock id for ``key``, stable across processes."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
