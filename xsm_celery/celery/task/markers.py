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
Any object with ``mark(task_id, attempt)`` and ``started(task_id)`` works too. A URL is opened
by ``xsm_celery.persistence.opening`` (Redis markers live in ``xsm_celery.redis.markers``,
database ones in ``xsm_celery.sqlalchemy.timers``); the protocol and the memory markers live
in ``xsm_celery.persistence.markers`` so those integrations need not import this one.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.celery.settings import broker_redis_url
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.markers import MARKER_KEY_PREFIX, AttemptMarkers, MemoryAttemptMarkers
from xsm_celery.persistence.opening import open_store, scheme_of, schemes_for

__all__ = [
    "AttemptMarkers",
    "BackendAttemptMarkers",
    "MemoryAttemptMarkers",
    "open_attempt_markers",
]

_KEY = MARKER_KEY_PREFIX

#: The setting markers are configured with, named in error messages.
_SETTING = "xsm_attempt_markers"


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


def open_attempt_markers(
    app: Any, configured: Any, timer_store_url: Any, ttl_s: float
) -> AttemptMarkers:
    """Resolve ``xsm_attempt_markers`` into a markers object (see the module docstring)."""
    if configured is not None and not isinstance(configured, str):
        return open_store(configured, "markers", setting=_SETTING)
    url = configured or _auto_url(app)
    if url is None and _is_key_value(app.backend):
        return BackendAttemptMarkers(app.backend)
    if url is None and isinstance(timer_store_url, str):
        # Markers in the timer database share its engine (and SQLite file).
        in_database = scheme_of(timer_store_url) in schemes_for("markers")
        url = timer_store_url if in_database else None
    if url is None:
        raise ConfigurationError(
            "no place for attempt markers: neither the broker nor the result backend is "
            "Redis or another key-value store, and xsm_timer_store is not a database URL; set "
            "app.conf.xsm_attempt_markers to a redis:// or database URL"
        )
    return open_store(url, "markers", setting=_SETTING, marker_ttl_s=ttl_s)


def _auto_url(app: Any) -> str | None:
    """The broker's URL if it is Redis, else the result backend's if that is Redis.

    A ``sentinel://`` broker's service name comes from ``broker_transport_options``.
    """
    conf = app.conf
    for url, options in (
        (conf.broker_url, conf.get("broker_transport_options")),
        (conf.result_backend, conf.get("result_backend_transport_options")),
    ):
        found = broker_redis_url(url, options)
        if found is not None and not found.lower().startswith(("redis+", "rediss+")):
            return found
    return None


def _is_key_value(backend: Any) -> bool:
    from celery.backends.base import KeyValueStoreBackend

    return isinstance(backend, KeyValueStoreBackend)
