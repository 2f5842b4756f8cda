"""Counts and durations of every task of a Celery app, under celery-exporter's metric names.

The ``xsm_task_*`` metrics count chart tasks from the fact stream; a Celery app runs other
tasks too (plain ``@app.task`` functions, Beat jobs, workflow event tasks). ``AppTaskMetrics``
counts all of them from Celery's own signals, inside the worker, so it needs no ``-E`` and
no event consumer, and under the prefork pool the counts land in ``prometheus_client``'s
multiprocess files like the rest. The names and labels are the ones celery-exporter users
already query (``celery_task_succeeded_total{name, hostname, queue_name}``...), so their
dashboards and alerts keep working; ``celery_task_runtime`` carries one more label,
``state``, because it times every finished attempt, not only successes.

Which signal gives which count:

* ``after_task_publish``: ``celery_task_sent_total`` (tasks this process sent: retries,
  sub-tasks, and everything a producer sends once it connects an ``AppTaskMetrics``);
* ``task_received``: ``celery_task_received_total`` (the worker's main process);
* ``task_prerun``: ``celery_task_started_total``;
* ``task_postrun``: ``celery_task_succeeded_total``, ``celery_task_failed_total``,
  ``celery_task_retried_total``, ``celery_task_rejected_total`` by the state the task ended
  in, and ``celery_task_runtime`` (seconds from prerun to postrun);
* ``task_revoked``: ``celery_task_revoked_total``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from celery import signals

from xsm_celery.errors import MissingExtraError
from xsm_celery.metrics.labels import OTHER, LabelGuard

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
except ImportError as exc:
    raise MissingExtraError(extra="metrics", module="prometheus_client") from exc

from xsm_celery.metrics.prometheus import DURATION_BUCKETS

__all__ = ["STATE_COUNTERS", "TASK_LABELS", "AppTaskMetrics"]

#: The labels of every task counter (celery-exporter's; ``failed`` adds ``exception``).
TASK_LABELS = ("name", "hostname", "queue_name")

#: Counter name (without ``_total``) for each state a task can be counted in.
STATE_COUNTERS = {
    "sent": "celery_task_sent",
    "received": "celery_task_received",
    "started": "celery_task_started",
    "succeeded": "celery_task_succeeded",
    "failed": "celery_task_failed",
    "retried": "celery_task_retried",
    "rejected": "celery_task_rejected",
    "revoked": "celery_task_revoked",
}

#: The state each Celery end state (``task_postrun``'s ``state``) is counted as.
_END_STATES = {
    "SUCCESS": "succeeded",
    "FAILURE": "failed",
    "RETRY": "retried",
    "REJECTED": "rejected",
}

#: Unfinished attempts kept for timing; beyond it the oldest are dropped (a killed child).
_MAX_RUNNING = 10_000

_DESCRIPTIONS = {
    "sent": "Task messages published by this process.",
    "received": "Task messages a worker received.",
    "started": "Tasks a worker started to run.",
    "succeeded": "Tasks that returned.",
    "failed": "Tasks that raised, by exception type.",
    "retried": "Tasks that asked to be retried.",
    "rejected": "Tasks that rejected their message.",
    "revoked": "Tasks revoked before or while running.",
}


class AppTaskMetrics:
    """The ``celery_task_*`` counters and the runtime histogram, fed by Celery's signals.

    Args:
        registry: Where the metrics register (Prometheus's default one if None).
        hostname: The worker's node name (``-n``), the ``hostname`` label of every sample.
    """

    def __init__(self, registry: CollectorRegistry | None = None, hostname: str = "") -> None:
        reg = REGISTRY if registry is None else registry
        self.hostname = hostname
        self.counters: dict[str, Counter] = {
            state: Counter(
                name,
                _DESCRIPTIONS[state],
                (*TASK_LABELS, "exception") if state == "failed" else TASK_LABELS,
                registry=reg,
            )
            for state, name in STATE_COUNTERS.items()
        }
        self.runtime = Histogram(
            "celery_task_runtime",
            "Seconds from a task's start to its end, by the state it ended in.",
            (*TASK_LABELS, "state"),
            registry=reg,
            buckets=DURATION_BUCKETS,
        )
        #: ``task_id -> (perf_counter at prerun, queue)`` of the attempts running now.
        self._started: dict[str, tuple[float, object]] = {}
        self._children: dict[tuple[object, ...], Any] = {}
        self._guards: dict[int, LabelGuard] = {}
        self._lock = threading.Lock()
        self._connected = False

    def connect(self) -> None:
        """Start counting: connect the signal receivers (again after ``disconnect``)."""
        if self._connected:
            return
        for signal, receiver in self._receivers():
            signal.connect(receiver, weak=False, dispatch_uid=self._uid(receiver))
        self._connected = True

    def disconnect(self) -> None:
        """Stop counting; what was counted stays."""
        for signal, receiver in self._receivers():
            signal.disconnect(receiver, dispatch_uid=self._uid(receiver))
        self._connected = False
        self._started.clear()

    def _uid(self, receiver: Any) -> str:
        return f"xsm_celery.metrics.app_tasks.{id(self)}.{receiver.__name__}"

    def _receivers(self) -> list[tuple[Any, Any]]:
        return [
            (signals.after_task_publish, self._on_published),
            (signals.task_received, self._on_received),
            (signals.task_prerun, self._on_prerun),
            (signals.task_postrun, self._on_postrun),
            (signals.task_revoked, self._on_revoked),
        ]

    def _child(self, metric: Any, values: tuple[object, ...]) -> Any:
        """The child of ``metric`` for ``(name, queue, ...)`` on this worker, cached.

        The task name, queue and exception come from messages, so they pass the label
        guard; the hostname is the worker's own node name (``w1@host``), set by its
        operator, and goes in as is. Children are cached only when admitted unchanged,
        so the cache is as bounded as the guard.
        """
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is not None:
            return child
        guard = self._guards.get(id(metric))
        if guard is None:
            with self._lock:
                guard = self._guards.setdefault(id(metric), LabelGuard())
        labels = guard.admit(values)
        child = metric.labels(labels[0], self.hostname, *labels[1:])
        if OTHER not in labels:
            self._children[key] = child
        return child

    def count(self, state: str, name: object, queue: object, exception: object = None) -> None:
        """Count one task ``name`` from ``queue`` in ``state`` (a key of ``STATE_COUNTERS``)."""
        values: tuple[object, ...] = (name, queue)
        if state == "failed":
            values = (name, queue, exception or "unknown")
        self._child(self.counters[state], values).inc()

    def _on_published(
        self, sender: Any = None, routing_key: Any = None, headers: Any = None, **_: Any
    ) -> None:
        name = headers.get("task") if isinstance(headers, Mapping) else None
        self.count("sent", name or sender, routing_key)

    def _on_received(self, request: Any = None, **_: Any) -> None:
        if request is not None:
            self.count("received", request.name, _queue_of(request.delivery_info))

    def _on_prerun(self, task_id: Any = None, task: Any = None, **_: Any) -> None:
        if task is None:
            return
        if len(self._started) >= _MAX_RUNNING:
            self._started.clear()
        queue = _queue_of(task.request.delivery_info)
        self._started[task_id] = (time.perf_counter(), queue)
        self.count("started", task.name, queue)

    def _on_postrun(
        self, task_id: Any = None, task: Any = None, retval: Any = None, state: Any = None, **_: Any
    ) -> None:
        began, queue = self._started.pop(task_id, None) or (None, None)
        ended = _END_STATES.get(state) if isinstance(state, str) else None
        if task is None or ended is None:
            return
        if began is None:
            queue = _queue_of(task.request.delivery_info)
        exception = type(retval).__name__ if isinstance(retval, BaseException) else None
        self.count(ended, task.name, queue, exception)
        if began is not None:
            runtime = self._child(self.runtime, (task.name, queue, ended))
            runtime.observe(time.perf_counter() - began)

    def _on_revoked(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        name = getattr(sender, "name", None) or getattr(request, "task", None)
        self.count("revoked", name, _queue_of(getattr(request, "delivery_info", None)))


def _queue_of(delivery_info: Any) -> object:
    """The queue a message came from: its routing key (the queue, on the default exchange)."""
    if isinstance(delivery_info, Mapping):
        return delivery_info.get("routing_key") or delivery_info.get("exchange")
    return None
