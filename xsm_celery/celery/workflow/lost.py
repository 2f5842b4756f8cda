"""Bounding a workflow step whose worker dies: lost runs are counted like failures.

The step task acknowledges late and is requeued when its worker is lost, so a step that
commits before the worker dies is answered from the inbox and one that did not is run
again. A step that kills its worker every time (a native crash, the OOM killer, a hard time
limit) would then come back for ever. So every run marks "run n of this task id started"
in the app's attempt markers (``xsm_attempt_markers``, as chart tasks do) before the step;
a redelivered message whose marker is ahead of what its arguments know of was lost that
many times. A lost run that had committed is not counted (the inbox has its receipt);
the others are recorded as ``WorkerLost`` (or ``TimeLimitKilled``) and retried by the
workflow's policy, then dead-lettered with reason ``worker_lost`` or ``time_limit``.

A marker store that cannot be read or written is logged and the run goes ahead uncounted:
an outage of the markers never stops a workflow.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.time_limits import lost_attempt_error
from xsm_celery.errors import WorkerLost

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.api import Workflow
    from xsm_celery.celery.workflow.step import Message

__all__ = ["LOST_KWARG", "RUNS_KWARG", "LostRuns", "count_lost_runs", "mark_run"]

logger = logging.getLogger("xsm_celery.workflow")

#: The step task's keyword arguments carried across its retries: the runs found lost so
#: far, and the runs of any kind (failed, lost, deferred by an outage) started so far.
LOST_KWARG = "lost"
RUNS_KWARG = "runs"


@dataclass(frozen=True)
class LostRuns:
    """What the markers say of this delivery.

    Attributes:
        total: Runs of this task id lost so far, this delivery's findings included.
        runs: Runs of this task id started before this one, lost ones included.
        new: The lost runs found by this delivery, one error each (oldest first).
    """

    total: int
    runs: int
    new: tuple[WorkerLost, ...] = ()


def count_lost_runs(
    workflow: Workflow, task: Any, key: str, message: Message, kwargs: dict[str, Any]
) -> LostRuns:
    """The lost runs of this step task, reading the marker only for a redelivered message."""
    counted = int(kwargs.get(LOST_KWARG) or 0)
    runs = int(kwargs.get(RUNS_KWARG) or 0)
    request = task.request
    if not (getattr(request, "delivery_info", None) or {}).get("redelivered"):
        return LostRuns(counted, runs)
    task_id = str(request.id)
    try:
        markers = stores_for(workflow.app).markers()
        started = markers.started(task_id)
    except Exception:
        logger.warning("workflow %s[%s]: could not read the attempt marker of %s; the "
                       "redelivered step runs uncounted", workflow.name, key, task_id,
                       exc_info=True)  # fmt: skip
        return LostRuns(counted, runs)
    missing = 0 if started is None else int(started) - runs
    if missing <= 0:
        return LostRuns(counted, runs)
    if _committed(workflow, key, message):
        return LostRuns(counted, runs + missing)
    errors = tuple(
        lost_attempt_error(markers, str(task.name), task_id, runs + 1 + i) for i in range(missing)
    )
    return LostRuns(counted + missing, runs + missing, errors)


def mark_run(workflow: Workflow, task: Any, lost: LostRuns) -> int:
    """Record that the next run of this task id starts now; return its number."""
    run = lost.runs + 1
    try:
        stores_for(workflow.app).markers().mark(str(task.request.id), run)
    except Exception:
        logger.warning("workflow %s: could not write the attempt marker of %s; a worker lost "
                       "during this step is not counted", workflow.name, task.request.id,
                       exc_info=True)  # fmt: skip
    return run


def _committed(workflow: Workflow, key: str, message: Message) -> bool:
    """Whether the inbox holds this message's receipt: the lost run had committed."""
    try:
        entry = workflow.stores().inbox.get(workflow.store_key(key), message.id)
    except Exception:
        return False
    # An entry without a receipt is a delivery in flight (or one that died holding it).
    return entry is not None and entry.receipt is not None
