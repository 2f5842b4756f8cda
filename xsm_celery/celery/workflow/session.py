"""The transaction of one workflow step: lock, inbox check, load; then save, receipt, log.

A step needs the same things from every store -- hold the instance, tell a redelivery apart,
read the snapshot, and write the snapshot with the message's inbox receipt and the transition
log -- but the round trips they cost differ. ``generic_session`` does them one store call at a
time, which every store supports (Django, SQLite, memory, SQLAlchemy on SQLite). A store may
offer a session of its own that folds them into fewer statements (``WorkflowStores.session``;
the SQLAlchemy store on PostgreSQL does, see ``xsm_celery.sqlalchemy.workflow_session``).

Either way the session is one transaction: what ``save`` and ``finish`` write commits together
when the block exits cleanly, and an exception leaving the block writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from xsm_celery.persistence.protocols import StoredSnapshot

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.stores import WorkflowStores

__all__ = ["GenericSession", "StepSession", "generic_session"]


class StepSession(Protocol):
    """One step's transaction, opened with the instance held and the message id checked.

    ``duplicate`` tells that the message id already has a receipt (nothing to do); else
    ``record`` is the instance as stored (``None``: unknown key).
    """

    duplicate: bool
    record: StoredSnapshot | None

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write (or queue for ``finish``) the new snapshot; return its version."""

    def finish(
        self, receipt: str, summary: dict[str, Any], transitions: list[dict[str, Any]]
    ) -> None:
        """Write the message's receipt and the transition log (and a queued snapshot)."""


class GenericSession:
    """A session made of the stores' own calls: lock, ``inbox.get``, ``load``, then writes."""

    def __init__(
        self, stores: WorkflowStores, key: str, message_id: str, ttl_s: float | None
    ) -> None:
        self._stores = stores
        self._key = key
        self._message_id = message_id
        self._ttl_s = ttl_s
        entry = stores.inbox.get(key, message_id)
        self.duplicate = entry is not None and entry.receipt is not None
        self.record: StoredSnapshot | None = None if self.duplicate else stores.snapshots.load(key)

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """The snapshot store's ``save``, inside the lock's transaction."""
        return int(
            self._stores.snapshots.save(
                key, snapshot, expected_version=expected_version, machine_version=machine_version
            )
        )

    def finish(
        self, receipt: str, summary: dict[str, Any], transitions: list[dict[str, Any]]
    ) -> None:
        """``inbox.mark`` and, when the stores keep one, the journal's ``record``."""
        self._stores.inbox.mark(self._key, self._message_id, receipt, ttl_s=self._ttl_s)
        if self._stores.journal is not None:
            self._stores.journal.record(summary, transitions)


@contextmanager
def generic_session(
    stores: WorkflowStores, key: str, message_id: str, *, timeout: float, ttl_s: float | None
) -> Iterator[StepSession]:
    """Hold ``key`` (the snapshot store's ``lock``: its transaction), then check and load."""
    with stores.snapshots.lock(key, timeout=timeout), stores.flat():
        yield GenericSession(stores, key, message_id, ttl_s)
