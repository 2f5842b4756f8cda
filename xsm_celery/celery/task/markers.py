"""Attempt markers: "attempt n of task id X has started", kept outside the message.

A chart task acknowledges late, so a message whose worker died comes back. Both Redis and
RabbitMQ flag it (``delivery_info['redelivered']``), but the flag alone over-counts: a worker
that restarts also hands back the messages it had prefetched or was holding for a countdown,
and those never started. So every attempt writes a marker just before the user's function
runs; a redelivered message counts as a lost attempt only when the marker says its attempt
had started. The marker is read only for redelivered messages, so the common path costs one
write.

Where markers go (``xsm_attempt_markers``): the broker's Redis when the broker is Redis, else
the result backend's Redis, else the result backend when it is another key-value store
(memcached), else the timer database.
Any object with ``mark(task_id, attempt)`` and ``started(task_id)`` works too.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol, runtime_checkable

from xsm_celery.celery.django_stores import is_django_url
from xsm_celery.celery.task.redis_markers import MARKER_KEY_PREFIX, RedisAttemptMarkers
from xsm_celery.errors import ConfigurationError

__all__ = [
    "AttemptMarkers",
    "BackendAttemptMarkers",
    "MemoryAttemptMarkers",
    "RedisAttemptMarkers",
    "open_attempt_markers",
]

_KEY = MARKER_KEY_PREFIX


@runtime_checkable
class AttemptMarkers(Protocol):
    """Where a worker records that an attempt started, so a redelivery can be classified.

    A store may send a marker without waiting for it to be acknowledged, as long as the
    write cannot be lost if the process dies right after ``mark`` returns (see
    ``RedisAttemptMarkers``).
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


class BackendAttemptMarkers:
    """Markers in a key-value Celery result backend, through its ``get``/``set``."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def mark(self, task_id: str, attempt: int) -> None:
        """Record the attempt (expires with the backend's result expiry)."""
        self._backend.set(_KEY + task_id, str(attempt))

    def started(self, task_id: str) -> int | None:
        """The recorded attempt, if any."""
        value = self._backend.get(_KEY + task_id)
        return None if value is None else int(value)


def open_attempt_markers(app: Any, configured: Any, timer_store_url: Any, ttl_s: float) -> Any:
    """Resolve ``xsm_attempt_markers`` into a markers object (see the module docstring)."""
    if configured is not None and not isinstance(configured, str):
        if not isinstance(configured, AttemptMarkers):
            raise ConfigurationError(
                f"xsm_attempt_markers={configured!r} has no mark()/started(); give a URL "
                "(redis://, sqlite:///, postgresql://) or an AttemptMarkers object"
            )
        return configured
    url = configured or _auto_url(app)
    if url is None and _is_key_value(app.backend):
        return BackendAttemptMarkers(app.backend)
    if url is None:
        usable = isinstance(timer_store_url, str) and not is_django_url(timer_store_url)
        url = timer_store_url if usable else None
    if url is None:
        raise ConfigurationError(
            "no place for attempt markers: neither the broker nor the result backend is "
            "Redis or another key-value store, and xsm_timer_store is not a database URL; set "
            "app.conf.xsm_attempt_markers to a redis:// or database URL"
        )
    return _from_url(url, ttl_s)


def _auto_url(app: Any) -> str | None:
    """The broker's URL if it is Redis, else the result backend's if that is Redis."""
    for url in (app.conf.broker_url, app.conf.result_backend):
        if isinstance(url, str) and url.startswith(("redis://", "rediss://")):
            return url
    return None


def _is_key_value(backend: Any) -> bool:
    from celery.backends.base import KeyValueStoreBackend

    return isinstance(backend, KeyValueStoreBackend)


def _from_url(url: str, ttl_s: float) -> Any:
    if url.startswith(("redis://", "rediss://")):
        return RedisAttemptMarkers.from_url(url, ttl_s)
    if url == "memory://":
        return MemoryAttemptMarkers()
    # Markers in a database share the timer store's engine and file; the SQLAlchemy code
    # stays in the sqlalchemy integration, which the celery integration may use.
    from xsm_celery.sqlalchemy.timers import SQLAlchemyAttemptMarkers

    return SQLAlchemyAttemptMarkers.from_url(url, ttl_s)
