"""Attempt markers: "attempt n of task id X has started", kept outside the message.

A chart task acknowledges late, so the message of a worker that died comes back; a marker
written just before the user's function runs tells a redelivery that really ran from one
that was only prefetched. The protocol lives here, beside the other store protocols, so the
Redis and SQLAlchemy integrations implement it without importing the Celery one, which
decides where markers go (``xsm_celery.celery.task.markers``).
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

__all__ = ["DEFAULT_MARKER_TTL_S", "MARKER_KEY_PREFIX", "AttemptMarkers", "MemoryAttemptMarkers"]

#: Seconds a marker lives when nothing else is said: it only has to outlive a redelivery.
DEFAULT_MARKER_TTL_S = 86_400.0

#: Key prefix of markers in a key-value store (``xsm:attempt:<task id>``).
MARKER_KEY_PREFIX = "xsm:attempt:"


@runtime_checkable
class AttemptMarkers(Protocol):
    """Where a worker records that an attempt started, so a redelivery can be classified.

    A store may send a marker without waiting for it to be acknowledged, as long as the
    write cannot be lost if the process dies right after ``mark`` returns (see
    ``xsm_celery.redis.markers.RedisAttemptMarkers``).
    """

    def mark(self, task_id: str, attempt: int) -> None:
        """Record that ``attempt`` (1-based) of ``task_id`` is about to run."""

    def started(self, task_id: str) -> int | None:
        """The highest attempt recorded for ``task_id``, or None."""


class MemoryAttemptMarkers:
    """Markers in this process only; for tests and single-process eager runs."""

    def __init__(self) -> None:
        self._marks: dict[str, int] = {}
        self._lock = threading.Lock()

    def mark(self, task_id: str, attempt: int) -> None:
        """Record the attempt."""
        with self._lock:
            self._marks[task_id] = attempt

    def started(self, task_id: str) -> int | None:
        """The recorded attempt, if any."""
        return self._marks.get(task_id)
