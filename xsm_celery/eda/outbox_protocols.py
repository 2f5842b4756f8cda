"""The outbox protocol: envelopes a step wrote, waiting for the relay to publish them.

Every outbox backend implements :class:`OutboxStore` (memory and SQLite here, SQLAlchemy
and Django in their integrations) and runs the same contract tests. It is an ``eda``
protocol, not a ``persistence`` one, because its rows are envelopes; the lease length it
shares with the durable timers, ``DEFAULT_CLAIM_LEASE_S``, stays in
:mod:`xsm_celery.persistence.protocols`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol, runtime_checkable

from xsm_celery.eda.envelope import Envelope
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S

__all__ = ["FailedOutboxRecord", "OutboxRecord", "OutboxStore"]


class OutboxRecord(NamedTuple):
    """One outbox row: its sequence number, the topic to publish on, the envelope."""

    seq: int
    topic: str
    envelope: Envelope


class FailedOutboxRecord(NamedTuple):
    """A row the broker refused ``attempts`` times, set aside so later rows can go out.

    ``failed_at`` is epoch seconds; ``last_error`` is the refusal's text, for the operator
    who fixes the cause and calls ``requeue(seq)``.
    """

    seq: int
    topic: str
    envelope: Envelope
    attempts: int
    last_error: str
    failed_at: float


@runtime_checkable
class OutboxStore(Protocol):
    """Envelopes waiting to be published, written in the snapshot's transaction.

    ``claim`` / ``release`` are the lease pair that lets several relays drain one outbox:
    a claimed row is skipped by other owners until its lease runs out. A store without
    them still works with ``OutboxRelay``, one relay per outbox.

    A row the broker refuses (not an outage) is counted with ``record_refusal``; at
    ``max_attempts`` it is set aside as failed: never pending, claimed or published again
    until an operator calls ``requeue``. ``failed`` lists such rows.
    """

    def add(self, topic: str, envelope: Envelope) -> int:
        """Append a row and return its sequence number (increasing)."""

    def pending(self, limit: int = 100) -> list[OutboxRecord]:
        """Return up to ``limit`` unsent rows in sequence order, leased or not."""

    def claim(
        self, limit: int, owner: str, lease_s: float = DEFAULT_CLAIM_LEASE_S
    ) -> list[OutboxRecord]:
        """Lease up to ``limit`` unsent rows to ``owner`` for ``lease_s`` seconds.

        Rows under another owner's live lease are skipped; rows already leased to
        ``owner`` are returned again (a restarted relay reclaims its own rows at once).
        """

    def release(self, seqs: Iterable[int], owner: str) -> int:
        """Hand back ``owner``'s leases on ``seqs`` at once; return how many were released."""

    def mark_sent(self, seqs: Iterable[int]) -> int:
        """Mark rows as published; return how many changed."""

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""

    def count(self, *, pending_only: bool = False, failed_only: bool = False) -> int:
        """Return how many rows the outbox holds.

        ``pending_only`` counts unsent rows that are not failed; ``failed_only`` counts the
        failed ones.
        """

    def record_refusal(self, seq: int, owner: str, error: str, *, max_attempts: int) -> int:
        """Count one refusal of row ``seq``, drop ``owner``'s lease, return its attempts.

        At ``max_attempts`` the row becomes failed. Returns 0 (and changes nothing) when
        the row is sent, failed already, or leased to someone else.
        """

    def failed(self, limit: int = 100) -> list[FailedOutboxRecord]:
        """Return up to ``limit`` failed rows in sequence order."""

    def requeue(self, seq: int) -> bool:
        """Make failed row ``seq`` pending again with no attempts; return whether it was."""
