"""Bounding a workflow step whose worker dies: lost runs are counted like failures.

The step task acknowledges late and is requeued when its worker is lost, so a step that
commits before the worker dies is answered from the inbox and one that did not is run
again. A step that kills its worker every time (a native crash, the OOM killer, a hard time
limit) would then come back for ever. So every run marks "run n of this task id started"
in the app's attempt markers (``xsm_attempt_markers``, as chart tasks do) before the step,
and every run that ends in a retry or a deferral marks "runs up to n are accounted for"
under the same task id with ``ENDED_SUFFIX``. A redelivered message whose started marker
is ahead of its ended marker was lost that many times. A lost run that had committed is not
counted (the inbox has its receipt); the others are recorded in the step's ledger as
``WorkerLost`` (or ``TimeLimitKilled``) and retried by the workflow's policy, then
dead-lettered with reason ``worker_lost`` or ``time_limit``.

Nothing of this is read from the message: its keyword arguments are ignored, so a forged
counter changes nothing. A message that is neither a retry nor a redelivery is a first run
(run 1), which costs one marker write and no read.

A marker store that cannot be read or written is logged and the run goes ahead uncounted:
an outage of the markers never stops a workflow.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.task.time_limits import lost_attempt_error
from xsm_celery.errors import WorkerLost

__all__ = ["ENDED_SUFFIX", "LostRuns", "count_lost_runs", "mark_ended", "mark_run"]

logger = logging.getLogger("xsm_celery.workflow")

#: Marker suffix of "runs up to n of this task id ended in a retry, a deferral or a loss".
ENDED_SUFFIX = ":ended"


@dataclass(frozen=True)
class LostRuns:
    """What the markers say of this delivery.

    Attributes:
        runs: Runs of this task id started before this one, lost ones included.
        new: The lost runs found by this delivery, one error each (oldest first).
    """

    runs: int
    new: tuple[WorkerLost, ...] = ()


def _redelivered(request: Any) -> bool:
    """Whether the broker handed this message back (its worker died or was restarted)."""
    return bool((getattr(request, "delivery_info", None) or {}).get("redelivered"))


def count_lost_runs(app: Any, task: Any, committed: Any) -> LostRuns:
    """The lost runs of this step task; ``committed()`` tells whether its step committed.

    A first run reads nothing. A retry reads how many runs are accounted for; a redelivery
    also reads how many started, and the difference is what was lost.
    """
    request = task.request
    redelivered = _redelivered(request)
    if not redelivered and not int(getattr(request, "retries", 0) or 0):
        return LostRuns(0)  # a first run: neither a Celery retry nor a redelivery
    task_id = str(request.id)
    try:
        markers = stores_for(app).markers()
        ended = int(markers.started(task_id + ENDED_SUFFIX) or 0)
        started = int(markers.started(task_id) or 0) if redelivered else ended
    except Exception:
        logger.warning(
            "could not read the attempt markers of workflow step %s; the run goes ahead uncounted",
            task_id,
            exc_info=True,
        )
        return LostRuns(0)
    missing = started - ended
    if missing <= 0:
        return LostRuns(ended)
    if committed():
        return LostRuns(started)
    errors = tuple(
        lost_attempt_error(markers, str(task.name), task_id, ended + 1 + i) for i in range(missing)
    )
    return LostRuns(started, errors)


def mark_run(app: Any, task: Any, lost: LostRuns) -> int:
    """Record that the next run of this task id starts now; return its number."""
    run = lost.runs + 1
    _mark(app, str(task.request.id), run)
    return run


def mark_ended(app: Any, task: Any, run: int) -> None:
    """Record that runs up to ``run`` ended without committing and were accounted for."""
    _mark(app, str(task.request.id) + ENDED_SUFFIX, run)


def _mark(app: Any, key: str, value: int) -> None:
    try:
        stores_for(app).markers().mark(key, value)
    except Exception:
        logger.warning(
            "could not write the attempt marker %s; a worker lost during this step is not counted",
            key,
            exc_info=True,
        )
