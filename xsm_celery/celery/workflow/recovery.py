"""The Beat scan that moves instances on when the broker lost their messages.

The workflow store is the truth and messages are wake-ups: every armed timer and every
dispatched task step has a row in the workflow's timer store, written in the step's
transaction and deleted by the step that applies it (the timer fired or was cancelled, the
task step's completion arrived or its state was left). A row still there after its message
should have arrived means the message was lost: a worker SIGKILLed while holding a countdown,
a Redis restart without persistence, a link callback never sent. The ``xsm-fire-timers``
Beat entry runs ``recover_overdue`` for each workflow:

* a **timer** row is due ``xsm_workflow_recovery_grace_s`` after its timer (a long timer's
  row is due at the timer itself, since no countdown carries it): its message is published
  again, with the same task id, so a late original is answered from the inbox;
* a **task step** row is due ``timeout_s`` after the dispatch (``celery_service(...,
  timeout_s=...)``): the result backend is asked first when there is one; a result there is
  applied as the completion Celery's callback would have sent, a task still running
  (``STARTED``, ``RETRY``) is left alone, and otherwise the task is sent again with the same
  task id and callbacks (task steps run at least once).

Each re-published row is postponed by the same delay rather than deleted, so a message lost
again is sent again; every recovery is reported as ``TIMER_FIRED`` with ``purpose``
``workflow_timer`` or ``workflow_task_step`` and ``lag_s``, how late the instance was woken.
A long timer's row published at its due time is not a recovery and reports nothing here: the
step that applies it reports the timer (``purpose="workflow"``), like a countdown's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.worker.timers import LEASE_S
from xsm_celery.celery.workflow.payloads import RECOVERY_KEY, completion, routing, send_spec
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.error_chain import truncate_message
from xsm_celery.persistence.protocols import DueTimer

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.context import StepContext

__all__ = ["recover_overdue"]

logger = logging.getLogger("xsm_celery.workflow")

_RUNNING = frozenset({"STARTED", "RETRY", "RECEIVED"})

#: A row due within this of its timer is the long timer's own row (stored times are rounded).
_SAME_DUE_S = 0.001


def recover_overdue(ctx: StepContext, now: float, batch: int, owner: str) -> int:
    """Re-publish the overdue rows of ``workflow``; return how many messages were sent."""
    timers = ctx.stores().timers
    grace = stores_for(ctx.app).settings.workflow_recovery_grace_s
    sent = 0
    for row in timers.claim(now, batch, owner, lease_s=LEASE_S):
        found = row.payload.get(RECOVERY_KEY)
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        kind = meta.get("kind")
        try:
            if kind == "dispatch":
                sent += _recover_task_step(ctx, row, meta, now)
                _postpone(timers, row, now + float(meta.get("timeout_s") or grace))
                continue
            send_spec(ctx.app, row.key, row.payload)
        except Exception:
            logger.exception(
                "workflow %s: could not re-publish %s %s; the next scan tries again",
                ctx.name,
                kind or "row",
                row.key,
            )
            continue
        sent += 1
        if kind == "timer":
            _postpone(timers, row, now + grace)
            due = float(meta.get("due_at") or row.due_at)
            if row.due_at <= due + _SAME_DUE_S:
                # A long timer's own row, due at the timer: this is its one message, not a
                # recovery (the step that applies it reports the timer as fired).
                continue
            emit(
                FactKind.TIMER_FIRED,
                workflow=ctx.name,
                purpose="workflow_timer",
                lag_s=max(0.0, now - due),
            )
            logger.warning(
                "workflow %s[%s]: timer message %s was not applied %.1f s after its "
                "due time; re-published",
                ctx.name,
                meta.get("key"),
                row.key,
                now - due,
            )
        else:
            timers.delete(row.id)  # a back-stop row of an earlier version: sent once
    return sent


def _recover_task_step(ctx: StepContext, row: DueTimer, meta: dict[str, Any], now: float) -> int:
    """Apply a result the backend holds, leave a running task, or send the task again."""
    task_id, key, invoke = row.key, str(meta.get("key")), str(meta.get("invoke"))
    state, result = _backend_state(ctx.app, task_id)
    late = max(0.0, now - float(meta.get("sent_at") or row.due_at))
    if state in _RUNNING:
        logger.info(
            "workflow %s[%s]: task step %s still %s after %.0f s",
            ctx.name,
            key,
            task_id,
            state,
            late,
        )
        return 0
    if state == "SUCCESS":
        message = completion("done", key, invoke, task_id)
        ctx.task.apply_async(args=[result, key, message], **routing(ctx.queue))
        what = "its result from the result backend applied"
    elif state == "FAILURE":
        info = {
            "task": str(row.payload.get("task") or ""),
            "type": type(result).__name__,
            "message": truncate_message(str(result)),
        }
        message = completion("error", key, invoke, task_id, info)
        ctx.task.apply_async(args=[key, message], **routing(ctx.queue))
        what = "its failure from the result backend applied"
    else:
        send_spec(ctx.app, task_id, row.payload)
        what = "sent again"
    emit(FactKind.TIMER_FIRED, workflow=ctx.name, purpose="workflow_task_step", lag_s=late)
    logger.warning(
        "workflow %s[%s]: task step %s (%s) had no completion %.0f s after it was sent; %s",
        ctx.name,
        key,
        row.payload.get("task"),
        task_id,
        late,
        what,
    )
    return 1


def _backend_state(app: Any, task_id: str) -> tuple[str, Any]:
    """The result backend's state and result of ``task_id``; ``("", None)`` with no backend."""
    from celery.backends.base import DisabledBackend

    try:
        if isinstance(app.backend, DisabledBackend):
            return "", None
        meta = app.backend.get_task_meta(task_id)
    except Exception:
        logger.info("could not read task %s from the result backend", task_id, exc_info=True)
        return "", None
    return str(meta.get("status") or ""), meta.get("result")


def _postpone(timers: Any, row: DueTimer, due_at: float) -> None:
    """Keep the row, due again at ``due_at`` (a store without ``postpone``: a new row)."""
    postpone = getattr(timers, "postpone", None)
    if callable(postpone):
        postpone(row.id, due_at)
        return
    timers.schedule(row.key, due_at, row.payload)
    timers.delete(row.id)
