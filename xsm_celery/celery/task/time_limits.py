"""A hard ``time_limit`` kill is a lost attempt: requeued, counted, then dead-lettered.

Celery's pool kills a child that overruns ``time_limit`` and, by default, acknowledges the
message and stores ``FAILURE``: one attempt, no retry, no dead letter. A chart task's
request instead hands the message back to the broker and notes in the attempt markers that
this attempt was killed by the limit. The redelivered message then finds both the "attempt
started" marker and this note, and feeds the chart a ``TimeLimitKilled`` (a ``WorkerLost``)
as the attempt's failure, so the policy retries it and the dead letter says ``time_limit``.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.request import Request

from xsm_celery.errors import TimeLimitKilled, WorkerLost

__all__ = ["TIME_LIMIT_MARKER_SUFFIX", "ChartTaskRequest", "lost_attempt_error"]

logger = logging.getLogger(__name__)

#: Appended to a task id to name the marker that records a time-limit kill.
TIME_LIMIT_MARKER_SUFFIX = ":time-limit"


class ChartTaskRequest(Request):
    """The worker-side request of a chart task: a hard time limit requeues the message."""

    def on_timeout(self, soft: bool, timeout: float) -> None:
        """Soft limits as Celery does; a hard one is noted and the message requeued.

        Nothing is stored as ``FAILURE``: the task is not over, its chart decides whether
        the next delivery retries or gives up.
        """
        if soft or not self.task.acks_late:
            super().on_timeout(soft, timeout)
            return
        from celery.worker.state import task_ready

        task_ready(self)
        logger.error(
            "Hard time limit (%ss) exceeded for %s[%s]; the message is requeued and the "
            "attempt counted",
            timeout,
            self.name,
            self.id,
        )
        _note_time_limit(self.task, self.id)
        self.reject(requeue=True)


def _note_time_limit(task: Any, task_id: str) -> None:
    """Record which attempt the limit killed, next to its "started" marker."""
    from xsm_celery.celery.stores import stores_for

    try:
        markers = stores_for(task.app).markers()
        started = markers.started(task_id)
        markers.mark(task_id + TIME_LIMIT_MARKER_SUFFIX, int(started or 1))
        # The redelivery reads this note, and it may start at once: Redis markers hold a
        # mark in the kernel until a bunch fills (up to 200 ms), so push it and wait for
        # its reply before the message goes back to the broker.
        flush = getattr(markers, "flush", None)
        if flush is not None:
            flush()
    except Exception:
        logger.warning(
            "could not record the time-limit kill of %s[%s]; its redelivery counts as a "
            "lost worker",
            task.name,
            task_id,
            exc_info=True,
        )


def lost_attempt_error(markers: Any, task_name: str, task_id: str, attempt: int) -> WorkerLost:
    """The failure a lost attempt is recorded as: ``TimeLimitKilled`` if the limit killed it."""
    where = f"attempt {attempt} of {task_name}[{task_id}]"
    try:
        killed = markers.started(task_id + TIME_LIMIT_MARKER_SUFFIX)
    except Exception:
        killed = None
    if killed is not None and int(killed) >= attempt:
        return TimeLimitKilled(
            f"{where} ran past its hard time_limit and was killed; the broker redelivered it"
        )
    return WorkerLost(
        f"the worker running {where} died before finishing it; the broker redelivered the message"
    )
