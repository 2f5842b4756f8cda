"""Long retry delays as durable timer rows, published by a Beat task when due.

A countdown message sits unacknowledged in the worker until it runs; the Redis transport
hands it to another worker once its visibility timeout passes, so a delay longer than that
runs twice. Delays above ``xsm_timer_countdown_max_s`` are therefore written to the timer
store, and ``xsm_celery.fire_timers`` (scheduled by ``Xsm.beat_schedule``) publishes the retry
once it is due. The row is deleted only after the publish succeeded, under a lease, so a
Beat or worker restart in between loses nothing (at worst a retry is published twice, and
the second delivery is the same attempt of the same chart).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery import shared_task

from xsm_celery.celery.stores import stores_for
from xsm_celery.hooks import FactKind, emit

__all__ = [
    "FIRE_TIMERS_TASK",
    "LEASE_S",
    "RECOVERY_KEY",
    "FireRows",
    "fire_due_timers",
    "fire_timers",
    "register_timer_source",
    "schedule_retry",
]

logger = logging.getLogger(__name__)

#: Name of the Beat task that publishes due timers.
FIRE_TIMERS_TASK = "xsm_celery.fire_timers"

#: Seconds a Beat process owns the rows it claimed before another may take them.
LEASE_S = 60.0

#: Key of a workflow row's payload saying what the row stands for (``kind``: timer or
#: dispatch); such a row is its workflow's to fire (``xsm_celery.celery.workflow.recovery``).
RECOVERY_KEY = "xsm_recovery"

#: The ``TIMER_FIRED`` purpose of a workflow row, by its kind, when no workflow claims it.
_WORKFLOW_PURPOSES = {"timer": "workflow_timer", "dispatch": "workflow_task_step"}


#: A source's own firing: ``(now, batch, owner) -> rows published``.
FireRows = Callable[[float, int, str], int]

_sources: weakref.WeakKeyDictionary[Any, dict[str, FireRows]] = weakref.WeakKeyDictionary()
_sources_lock = threading.Lock()


def register_timer_source(app: Any, name: str, fire: FireRows) -> None:
    """Have ``fire_due_timers`` also fire the due rows of another timer store.

    Workflows keep their timer rows in their own store's database (so the rows commit with
    the snapshot), and fire them their own way: a row is re-published and kept until the
    step that applies it deletes it (``xsm_celery.celery.workflow.recovery``). One Beat
    entry thus fires chart-task retries and every workflow's rows.
    """
    with _sources_lock:
        _sources.setdefault(app, {})[name] = fire


def schedule_retry(
    app: Any,
    *,
    task_name: str,
    task_id: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    headers: Mapping[str, Any],
    retries: int,
    due_at: float,
    options: Mapping[str, Any],
) -> str:
    """Write the retry of ``task_id`` as a timer row due at ``due_at`` (epoch s)."""
    payload = {
        "task": task_name,
        "args": list(args),
        "kwargs": dict(kwargs),
        "headers": dict(headers),
        "retries": retries,
        "options": dict(options),
    }
    return str(stores_for(app).timers().schedule(task_id, due_at, payload))


def fire_due_timers(app: Any, *, now: float | None = None, owner: str | None = None) -> int:
    """Publish every due retry (at most ``xsm_timer_batch``); return how many were sent.

    A row whose publish fails keeps its lease and is retried by a later tick once the
    lease runs out; the error is logged with the task id.
    """
    stores = stores_for(app)
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    now = time.time() if now is None else now
    batch = stores.settings.timer_batch
    sent = _fire_from(app, stores.timers(), now, batch, owner)
    for name, fire in sorted(_sources.get(app, {}).items()):
        try:
            sent += fire(now, batch, f"{owner}:{name}")
        except Exception:
            logger.exception("could not fire the due timers of %s; will try again", name)
    return sent


def _fire_from(app: Any, timers: Any, now: float, batch: int, owner: str) -> int:
    """Publish the due rows of one timer store; return how many were sent.

    A workflow whose store is the app's timer database (``"django"`` for both, one SQLite
    file) keeps its rows in the same table. Those rows are handed back for the workflow's
    own scan, which runs next and keeps each row until its step applies it; only when no
    workflow is registered here is such a row published like a retry, and counted under
    its own purpose, never as a retry.
    """
    due = timers.claim(now, batch, owner, lease_s=LEASE_S)
    workflow_rows = [t for t in due if isinstance(t.payload.get(RECOVERY_KEY), dict)]
    if workflow_rows and _sources.get(app):
        timers.release([t.id for t in workflow_rows], owner)
        due = [t for t in due if t not in workflow_rows]
    sent = 0
    for timer in due:
        try:
            _publish(app, timer.key, timer.payload)
        except Exception:
            logger.exception("could not publish the retry of task %s; will try again", timer.key)
            continue
        timers.delete(timer.id)
        recovery = timer.payload.get(RECOVERY_KEY)
        kind = recovery.get("kind") if isinstance(recovery, dict) else None
        emit(
            FactKind.TIMER_FIRED,
            task=timer.payload.get("task"),
            purpose=_WORKFLOW_PURPOSES.get(str(kind), "retry") if kind else "retry",
            lag_s=max(0.0, now - timer.due_at),
        )
        sent += 1
    return sent


def _publish(app: Any, task_id: str, payload: Mapping[str, Any]) -> None:
    app.send_task(
        payload["task"],
        args=payload.get("args") or [],
        kwargs=payload.get("kwargs") or {},
        task_id=task_id,
        headers=payload.get("headers") or {},
        retries=int(payload.get("retries") or 0),
        **dict(payload.get("options") or {}),
    )


@shared_task(name=FIRE_TIMERS_TASK, bind=True, ignore_result=True)
def fire_timers(self: Any) -> int:
    """Beat task: publish the chart-task retries whose durable timers are due."""
    return fire_due_timers(self.app)
