"""The store protocols every backend implements: snapshots, inbox, durable timers, locks.

Memory and SQLite implementations live in this package; SQLAlchemy, Django and Redis ones
live in their integration packages and run the same contract tests. Every method is
synchronous and must be safe to call from several threads; asyncio callers run them in a
thread. A backend that fails (database down, connection lost) raises ``StoreError`` or a
subclass, never a driver exception, so callers can tell an outage from a bad message.

Transactions: a snapshot store's ``lock(key)`` is its transaction when it has one (SQLite
``BEGIN IMMEDIATE``, a ``SELECT ... FOR UPDATE``). An outbox built over the same store
(``SQLiteOutboxStore(sqlite_store)``) writes through that transaction, so its rows commit or
roll back with the snapshot they describe. The outbox's own protocol holds envelopes, so it
is :mod:`xsm_celery.eda.outbox_protocols`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_CLAIM_LEASE_S",
    "DueTimer",
    "Inbox",
    "InboxEntry",
    "LockStrategy",
    "StateStore",
    "StoredSnapshot",
    "TimerStore",
]

#: Seconds a relay (or timer scanner) owns the rows it claimed before another may take them.
DEFAULT_CLAIM_LEASE_S = 30.0


@dataclass(frozen=True)
class StoredSnapshot:
    """One machine instance as a store keeps it.

    ``version`` starts at 1 on the first save and grows by one per save: it is the token
    optimistic locking compares. ``updated_at`` is epoch seconds of the last save.
    """

    key: str
    snapshot: str
    version: int
    machine_version: str = ""
    updated_at: float = 0.0


@runtime_checkable
class StateStore(Protocol):
    """Where machine snapshots live between deliveries."""

    def load(self, key: str) -> StoredSnapshot | None:
        """Return the current record of ``key``, or ``None`` if there is none."""

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        """Write ``snapshot`` and return the new version.

        With ``expected_version`` the write happens only if the stored version equals it
        (``0`` means "the key must not exist yet"); otherwise ``ConflictError`` is raised
        and nothing is written. Without it the last writer wins.
        """

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it existed."""

    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Return up to ``limit`` keys starting with ``prefix``, sorted."""

    def lock(self, key: str, *, timeout: float = 10.0) -> AbstractContextManager[object]:
        """Hold ``key`` exclusively (and, where the store has one, open its transaction).

        Raises ``LockTimeoutError`` if the lock is not acquired within ``timeout`` seconds.
        An exception leaving the block rolls the transaction back.
        """


@dataclass(frozen=True)
class InboxEntry:
    """What an inbox remembers about one idempotency key.

    ``receipt`` is ``None`` while the first delivery is still in flight; afterwards it is
    the JSON receipt a redelivery is answered with. ``fingerprint`` identifies the event
    and payload first seen under the key, so a reused id with other content is caught.
    """

    fingerprint: str
    receipt: str | None
    expires_at: float | None


@runtime_checkable
class Inbox(Protocol):
    """Processed idempotency keys, so a redelivery is answered instead of re-run.

    ``scope`` separates principals and instances (for the dispatcher: the envelope source
    and the instance key); ``key`` is the envelope id by default.
    """

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """Return the live entry for ``(scope, key)``, or ``None`` if unseen or expired."""

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Atomically record ``(scope, key)`` as in flight; return whether this caller won."""

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of a claimed key; later claims are answered with it."""

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim (the attempt failed) so a redelivery can claim again."""

    def purge_expired(self, *, now: float | None = None) -> int:
        """Delete expired entries; return how many."""

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many."""


class DueTimer(NamedTuple):
    """One durable ``after`` timer: its id, the instance key, when it is due, its payload."""

    id: str
    key: str
    due_at: float
    payload: dict[str, Any]


@runtime_checkable
class TimerStore(Protocol):
    """Durable ``after`` timers of persisted machines, fired by a scanner when due.

    Timers longer than a broker's visibility timeout cannot be plain task countdowns, so
    they are rows. ``due_at`` is epoch seconds (wall clock: it must survive a restart).
    """

    def schedule(self, key: str, due_at_wall: float, payload: dict[str, Any]) -> str:
        """Store a timer for instance ``key`` and return its id."""

    def due(self, now: float, limit: int = 100) -> list[DueTimer]:
        """Return up to ``limit`` timers due at ``now`` or earlier, earliest first."""

    def claim(
        self, now: float, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[DueTimer]:
        """Lease up to ``limit`` due timers to ``owner``; others skip them until it expires."""

    def release(self, ids: Sequence[str], owner: str) -> int:
        """Hand back ``owner``'s leases on ``ids``; return how many were released."""

    def delete(self, timer_id: str) -> bool:
        """Remove one timer (it fired or was cancelled); return whether it existed."""

    def delete_key(self, key: str) -> int:
        """Remove every timer of instance ``key``; return how many."""

    def postpone(self, timer_id: str, due_at_wall: float) -> bool:
        """Move one timer to ``due_at_wall`` and free its lease; return whether it exists.

        A workflow's Beat scan re-publishes an overdue row and postpones it, keeping it until
        the step that applies its message deletes it.
        """


class LockStrategy(Protocol):
    """How ``persisted()`` keeps concurrent writers of one instance from losing updates.

    ``OptimisticLock`` and ``PessimisticLock`` implement it; a custom strategy (a Redis lock,
    an advisory lock) needs only these two methods.
    """

    def acquire(self, store: StateStore, key: str) -> AbstractContextManager[Any]:
        """What to hold for the whole load-act-save of ``key``."""

    def expected(self, loaded_version: int) -> int | None:
        """The version the save must find (None: overwrite whatever is there)."""
