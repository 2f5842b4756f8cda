"""Celery events for retries, dead letters, deferrals and workflow transitions.

Celery's monitors (``celery -A proj events``, Flower) read the event stream the workers
publish on the broker. ``CeleryEvents`` sends the facts an operator watches there as
custom event types beside the task events, through an event ``Dispatcher`` of the app
(one per process, opened on first use, so a pool child never shares its parent's
connection). Only bounded fields travel (names, ids, reasons, numbers), never arguments.

The events follow Celery's own switch: a worker started with ``-E`` (or an app with
``worker_send_task_events = True``) sends them; ``xsm_send_events`` True or False overrides
that either way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from xsm_celery.hooks import Fact, FactKind, subscribe
from xsm_celery.process import current_pid

__all__ = ["EVENT_TYPES", "CeleryEvents", "event_fields", "events_wanted", "install_events"]

logger = logging.getLogger(__name__)

#: The Celery event type each fact is sent as.
EVENT_TYPES: dict[FactKind, str] = {
    FactKind.RETRY_SCHEDULED: "xsm-retry-scheduled",
    FactKind.GAVE_UP: "xsm-gave-up",
    FactKind.DEAD_LETTER_WRITTEN: "xsm-dead-letter",
    FactKind.DEAD_LETTER_REPLAYED: "xsm-replayed",
    FactKind.LIMIT_DEFERRED: "xsm-deferred",
    FactKind.WORKFLOW_TRANSITION: "xsm-workflow-transition",
    FactKind.BREAKER_TRANSITION: "xsm-breaker-transition",
}

#: Event fields the dispatcher sets itself; a fact's field of that name is left out.
_RESERVED = frozenset({"type", "hostname", "timestamp", "utcoffset", "pid", "clock", "uuid"})
_MAX_TEXT = 200


def events_wanted(app: Any, worker: Any = None) -> bool:
    """Whether a worker of ``app`` sends the ``xsm-*`` events.

    ``xsm_send_events`` decides when it is set. Otherwise they follow the task events:
    ``-E`` sets the worker's ``task_events`` (not ``app.conf``), and without a worker the
    app's ``worker_send_task_events`` setting answers.
    """
    forced = app.conf.get("xsm_send_events")
    if forced is not None:
        return bool(forced)
    task_events = getattr(worker, "task_events", None)
    if task_events is None:
        task_events = app.conf.get("worker_send_task_events")
    return bool(task_events)


def event_fields(fields: Mapping[str, object]) -> dict[str, Any]:
    """The JSON-safe, bounded part of a fact's fields, as event fields."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name in _RESERVED:
            continue
        if isinstance(value, str):
            out[name] = value[:_MAX_TEXT]
        elif value is None or isinstance(value, bool | int | float):
            out[name] = value
    return out


class CeleryEvents:
    """Send the facts of ``EVENT_TYPES`` as Celery events of ``app``.

    Args:
        app: The Celery app whose broker carries the events.
        hostname: The sender's name in monitors (the worker's ``hostname``).
    """

    def __init__(self, app: Any, hostname: str | None = None) -> None:
        self.app = app
        self.hostname = hostname
        self._lock = threading.Lock()
        self._dispatcher: Any = None
        self._pid = 0

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber."""
        event_type = EVENT_TYPES.get(fact.kind)
        if event_type is None:
            return
        fields = event_fields(fact.fields)
        task_id = fact.fields.get("task_id")
        with self._lock:
            dispatcher = self._open()
            dispatcher.send(
                event_type, uuid=task_id if isinstance(task_id, str) else None, **fields
            )

    def _open(self) -> Any:
        if self._dispatcher is None or self._pid != current_pid():
            connection = self.app.connection_for_write()
            self._dispatcher = self.app.events.Dispatcher(
                connection, hostname=self.hostname, enabled=True
            )
            self._pid = current_pid()
        return self._dispatcher

    def close(self) -> None:
        """Close the dispatcher and its connection."""
        with self._lock:
            dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            dispatcher.close()
            dispatcher.connection.release()


def install_events(app: Any, hostname: str | None = None) -> CeleryEvents:
    """Create the Celery-events subscriber for ``app`` and subscribe it; return it."""
    events = CeleryEvents(app, hostname)
    subscribe(events.handle)
    return events
