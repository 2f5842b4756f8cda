"""Carry out one run of a chart task: read the message, step the chart, act on the outcome.

Everything that can be computed once per task (the machine, the policy, the settings, the
function's signature) is in ``Bound``; a run only reads the ``xsm_chart`` header, writes the
attempt marker and steps the chart. A redelivered message (``delivery_info['redelivered']``,
set by both the Redis and the AMQP transports) consults the attempt marker: if the attempt
it carries had started, the worker died running it, and the run records a ``WorkerLost``
failure instead of running the function again.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from celery.exceptions import Retry

from xsm_celery.celery.attempt import Outcome, Run, run_chart
from xsm_celery.celery.dead_letters import DeadLetterWriter, TaskFailure
from xsm_celery.celery.settings import XsmSettings
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.timers import schedule_retry
from xsm_celery.errors import TaskGaveUp, WorkerLost
from xsm_celery.patterns import RetryPolicy

__all__ = ["HEADER", "Bound", "execute"]

logger = logging.getLogger(__name__)

#: The message header that carries the chart snapshot between runs.
HEADER = "xsm_chart"


@dataclass(frozen=True)
class Bound:
    """A chart task's per-process constants, built when Celery binds the task."""

    app: Any
    machine: Any
    policy: RetryPolicy
    settings: XsmSettings
    signature: inspect.Signature | None
    redact_keys: tuple[str, ...] | None

    @functools.cached_property
    def writer(self) -> DeadLetterWriter:
        """Writes this task's dead letters to the app's store (opened on first use)."""
        return DeadLetterWriter(
            lambda: stores_for(self.app).dead_letters(), self.signature, self.redact_keys
        )


def execute(task: Any, bound: Bound, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Run one attempting step for ``task`` and return, retry or fail as the chart says."""
    request = task.request
    snapshot = (request.headers or {}).get(HEADER)
    run = Run(call=functools.partial(task.run, *args, **kwargs))
    if not request.is_eager:
        markers = stores_for(bound.app).markers()
        run.mark = functools.partial(markers.mark, request.id)
        if (request.delivery_info or {}).get("redelivered"):
            run.lost = _lost_attempt(task, markers, snapshot)
    outcome = run_chart(bound.machine, snapshot, run)
    if outcome.kind == "done":
        return run.result
    if outcome.kind == "control":
        raise _control(run)
    if outcome.kind == "give_up":
        raise _give_up(task, bound, outcome, args, kwargs)
    raise _retry(task, bound, outcome, args, kwargs)


def _control(run: Run) -> BaseException:
    assert run.control is not None
    return run.control


def _lost_attempt(task: Any, markers: Any, snapshot: str | None) -> BaseException | None:
    """A ``WorkerLost`` if this redelivered message's attempt had started, else None."""
    attempt = _attempt_in(snapshot) + 1
    try:
        started = markers.started(task.request.id)
    except Exception:
        logger.warning(
            "could not read the attempt marker of %s[%s]; running the redelivered message "
            "as a new attempt",
            task.name,
            task.request.id,
            exc_info=True,
        )
        return None
    if started is None or int(started) < attempt:
        return None
    return WorkerLost(
        f"the worker running attempt {attempt} of {task.name}[{task.request.id}] died "
        "before finishing it; the broker redelivered the message"
    )


def _attempt_in(snapshot: str | None) -> int:
    if snapshot is None:
        return 0
    try:
        value = json.loads(snapshot).get("context", {}).get("attempt", 0)
        return int(value)
    except (ValueError, TypeError, AttributeError):
        return 0


def _give_up(
    task: Any, bound: Bound, outcome: Outcome, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> BaseException:
    run, machine = outcome.run, bound.machine
    error = run.error
    bound.writer.write(
        TaskFailure(
            task_name=str(task.name),
            task_id=str(task.request.id),
            args=list(args),
            kwargs=dict(kwargs),
            hostname=task.request.hostname,
            machine_id=str(machine.id),
            machine_hash=str(machine.structure_hash),
            machine_version=machine.version,
            state_id=str(outcome.state_id),
            event_type=_event_type(machine),
            snapshot=json.loads(outcome.interpreter.get_snapshot()),
            error=error,
            retryable=error is None or bound.policy.should_retry(error),
            workflow=_workflow_of(task.request),
        )
    )
    if error is None:
        return TaskGaveUp(
            f"task {task.name}[{task.request.id}] entered dead-letter state "
            f"{outcome.state_id!r} without an error; its dead letter is in the store"
        )
    return error


def _event_type(machine: Any) -> str:
    for invoke in machine.invokes:
        if invoke.src == "work":
            return str(invoke.error_type)
    return "error.platform.work"


def _retry(
    task: Any, bound: Bound, outcome: Outcome, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> BaseException:
    assert outcome.delay_ms is not None
    delay_s = outcome.delay_ms / 1000.0
    headers: dict[str, Any] = {HEADER: outcome.interpreter.get_snapshot()}
    workflow = _workflow_of(task.request)
    if workflow is not None:
        headers[WORKFLOW_HEADER] = workflow
    error = outcome.run.error
    if delay_s <= bound.settings.timer_countdown_max_s:
        result: BaseException = task.retry(countdown=delay_s, exc=error, headers=headers)
        return result
    due = time.time() + delay_s
    request = task.request
    schedule_retry(
        task.app,
        task_name=str(task.name),
        task_id=str(request.id),
        args=list(args),
        kwargs=dict(kwargs),
        headers=headers,
        retries=int(request.retries) + 1,
        due_at=due,
        options=_route(request),
    )
    cause = error if isinstance(error, Exception) else None
    return Retry(exc=cause, when=datetime.fromtimestamp(due, tz=timezone.utc))


def _route(request: Any) -> dict[str, Any]:
    """Where the retry goes: the queue the message came from, as ``Task.retry`` does."""
    info = request.delivery_info or {}
    routing_key, exchange = info.get("routing_key"), info.get("exchange")
    if exchange == "" and routing_key:
        return {"queue": routing_key}
    return {k: v for k, v in (("exchange", exchange), ("routing_key", routing_key)) if v}


#: Message header naming the workflow instance that dispatched a task as one of its steps.
WORKFLOW_HEADER = "xsm_workflow"


def _workflow_of(request: Any) -> dict[str, str] | None:
    """``{workflow, key}`` of the workflow step that sent this task, if one did."""
    raw = getattr(request, WORKFLOW_HEADER, None)
    if raw is None:
        raw = (getattr(request, "headers", None) or {}).get(WORKFLOW_HEADER)
    if isinstance(raw, dict) and isinstance(raw.get("workflow"), str):
        return {"workflow": str(raw["workflow"]), "key": str(raw.get("key", ""))}
    return None
