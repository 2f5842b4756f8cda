"""What admission remembers about one task id in Redis: its reserved token and its deferrals.

A message header is written by whoever publishes the message, so it can say anything. When
a deferral reserves a rate-limit token for a task, the reservation is therefore a record in
Redis, keyed by the limit and the task id, consumed once and expiring after the token's
moment plus :data:`RESERVATION_GRACE_MS`; the deferred message's header only points at it.
A header naming a reservation Redis does not hold buys nothing: the task is admitted the
normal way. Likewise the deferral history that decides when a task has waited too long
(``xsm_fleet_max_deferral_s``) is a record here, first written by the first deferral Redis
saw, never a time read from a header.

Task ids come from the producer too, so one that is long or carries characters a key name
should not is replaced by its digest in the key (:func:`task_ref`).
"""

from __future__ import annotations

import hashlib
import re

from xsm_celery.redis.fleet_store import FleetRedis

__all__ = ["RESERVATION_GRACE_MS", "AdmissionRecords", "task_ref"]

#: How long a reservation outlives the moment of its token: the deferred message may wait
#: behind others in the queue. One that arrives later is admitted the normal way.
RESERVATION_GRACE_MS = 600_000

#: How long a deferral record outlives ``xsm_fleet_max_deferral_s`` since its last deferral.
_HISTORY_SLACK_MS = 3_600_000

_PLAIN_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def task_ref(task_id: str) -> str:
    """The task id as it appears in a key: itself when short and plain, else its digest."""
    if _PLAIN_ID.match(task_id):
        return task_id
    return "sha256-" + hashlib.sha256(task_id.encode("utf-8", "replace")).hexdigest()[:32]


class AdmissionRecords:
    """Reservations and deferral histories of task ids, in the fleet's Redis.

    Every method raises ``StoreUnavailableError`` when Redis cannot be reached; the caller
    applies the limit's ``on_redis_down`` choice.
    """

    def __init__(self, store: FleetRedis) -> None:
        self.store = store

    def _reservation_key(self, limit: str, task_id: str) -> str:
        return f"{self.store.prefix}reserved:{limit}:{task_ref(task_id)}"

    def _history_key(self, task_id: str) -> str:
        return f"{self.store.prefix}deferrals:{task_ref(task_id)}"

    def reserve(self, limit: str, task_id: str, wait_ms: float) -> None:
        """Record that ``task_id`` holds the token of ``limit`` due in ``wait_ms``."""
        ttl = int(max(0.0, wait_ms)) + RESERVATION_GRACE_MS
        key = self._reservation_key(limit, task_id)
        self.store.call(lambda: self.store.client.set(key, b"1", px=ttl))

    def take(self, limit: str, task_id: str) -> bool:
        """Consume the reservation of ``task_id`` on ``limit``; False when Redis holds none."""
        key = self._reservation_key(limit, task_id)
        return bool(self.store.call(lambda: self.store.client.delete(key)))

    def note_deferral(self, task_id: str, max_deferral_s: float) -> tuple[float, int, float]:
        """Count one more deferral of ``task_id``: (first deferral, deferrals, now), epoch s."""
        ttl = int(max_deferral_s * 1000) + _HISTORY_SLACK_MS
        first, count, now = self.store.run("DEFERRAL_NOTE", (self._history_key(task_id),), (ttl,))
        return float(first) / 1000.0, int(count), float(now) / 1000.0

    def forget_deferrals(self, task_id: str) -> None:
        """Drop the deferral history of ``task_id`` (it was admitted or dead-lettered)."""
        key = self._history_key(task_id)
        self.store.call(lambda: self.store.client.delete(key))
