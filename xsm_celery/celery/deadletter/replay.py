"""``replay_task``: send a dead-lettered task again, with its arguments and a fresh chart.

A replay is an operator's decision, so it is a dry run unless asked otherwise, a real one
needs a reason, and it is audited in the store next to the record. The task gets a new id
(the dead one keeps its ``FAILURE`` result) and no ``xsm_chart`` header, so its chart starts
over at attempt 1, and it keeps the chain and callbacks the original message carried (a
chord member is refused: it cannot rejoin its chord). A record whose arguments were redacted
is refused: sending ``"***"`` in place of a card token would only fail again, or worse,
succeed with the wrong value.

A record that belongs to a durable workflow (``workflow_of_record``) names its workflow and
key in the result. Its step message is sent again as any task is; its task step goes through
the instance (``xsm_celery.celery.workflow.replay``): sent with its own task id and the
workflow's callbacks while the instance still waits for it, refused once it moved on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from celery.utils import uuid

from xsm_celery.celery.deadletter.canvas import replay_options
from xsm_celery.celery.workflow.replay import (
    TaskStepReplay,
    describe_step_message,
    replay_task_step,
    workflow_of_record,
)
from xsm_celery.engine.redact import REDACTED
from xsm_celery.errors import ReplayRefusedError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.operators import current_actor
from xsm_celery.patterns.dead_letter.workflow import WorkflowPart, WorkflowRef

__all__ = ["TaskReplayResult", "replay_task"]


@dataclass(frozen=True)
class TaskReplayResult:
    """What a replay did (or, for a dry run, would do)."""

    record_id: str
    dry_run: bool
    outcome: str
    task_name: str
    task_id: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    #: The workflow the record belongs to (a step message or a task step), else None.
    workflow: str | None = None
    #: The key of that workflow's instance, else None.
    key: str | None = None


def replay_task(
    store: Any,
    record_id: str,
    app: Any,
    *,
    reason: str | None = None,
    dry_run: bool = True,
    actor: str | None = None,
) -> TaskReplayResult:
    """Re-enqueue the task of dead letter ``record_id`` and mark the record resolved.

    Args:
        store: The dead-letter store holding the record.
        record_id: The record's id.
        app: The Celery app to send the task with.
        reason: Why it is replayed; required for a real replay, kept in the audit row.
        dry_run: Only report what would happen; nothing is sent, marked or audited.
        actor: Who replays (the login name of this process by default).

    Raises:
        ReplayRefusedError: no such record, not a task's record, already resolved,
            redacted arguments, a real replay without a reason, or a workflow's task step
            whose workflow is not declared here or whose instance no longer waits for it.
    """
    record = _replayable(store, record_id)
    ref = workflow_of_record(record)
    warnings = _warnings(app, record)  # first: it imports the modules that declare workflows
    step = None
    if ref is not None and ref.part is WorkflowPart.TASK_STEP:
        step = replay_task_step(app, record, ref)
    # A task step's callbacks are the workflow's, rebuilt by its replay; others keep theirs.
    options = {} if step else replay_options(record_id, (record.event or {}).get("payload"))
    args, kwargs = list(record.task_args or []), dict(record.task_kwargs or {})
    name = str(record.task_name)
    owner = (ref.workflow, ref.key) if ref is not None else (None, None)
    if dry_run:
        outcome = _dry_outcome(record, ref, step)
        return TaskReplayResult(
            record_id, True, outcome, name, None, args, kwargs, warnings, *owner
        )
    if not reason or not reason.strip():
        raise ReplayRefusedError(
            f"replaying dead letter {record_id} needs a reason (reason='...'); it is audited"
        )
    task_id, outcome = _send(app, record, step, options)
    store.mark_resolved(record_id, time.time())
    store.audit(record_id, "replay", actor=current_actor(actor), reason=reason, outcome=outcome)
    emit(
        FactKind.DEAD_LETTER_REPLAYED,
        source="task",
        task=name,
        task_id=task_id,
        record_id=record_id,
        reason=record.reason,
    )
    return TaskReplayResult(
        record_id, False, outcome, name, task_id, args, kwargs, warnings, *owner
    )


def _send(
    app: Any, record: Any, step: TaskStepReplay | None, options: dict[str, Any]
) -> tuple[str, str]:
    """Send the task (a task step through its workflow); its task id and the outcome."""
    name = str(record.task_name)
    if step is not None:
        task_id = step.send()
        return task_id, f"sent task step {name} of workflow {step.ref} again as task {task_id}"
    task_id = uuid()
    app.send_task(
        name,
        args=list(record.task_args or []),
        kwargs=dict(record.task_kwargs or {}),
        task_id=task_id,
        **options,
    )
    return task_id, f"sent {name} as task {task_id}"


def _dry_outcome(record: Any, ref: WorkflowRef | None, step: TaskStepReplay | None) -> str:
    if step is not None:
        return f"dry run: {step.describe()}"
    if ref is not None and ref.part is WorkflowPart.STEP_MESSAGE:
        return f"dry run: {describe_step_message(ref, record)}"
    args, kwargs = list(record.task_args or []), dict(record.task_kwargs or {})
    return f"dry run: would send {record.task_name} with args={args!r} kwargs={kwargs!r}"


def _replayable(store: Any, record_id: str) -> Any:
    record = store.get(record_id)
    if record is None:
        raise ReplayRefusedError(f"no dead letter with id {record_id!r} in {store!r}")
    if not record.task_name:
        raise ReplayRefusedError(
            f"dead letter {record_id} was not written by a Celery task (no task name); "
            "replay it with the dispatcher it came from"
        )
    if record.resolved_at is not None:
        raise ReplayRefusedError(
            f"dead letter {record_id} was already resolved "
            f"({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(record.resolved_at))}); "
            "it is not sent twice"
        )
    redacted = (
        _redacted_paths(record.task_args, "args")
        + _redacted_paths(record.task_kwargs, "kwargs")
        + _redacted_paths((record.event or {}).get("payload"), "canvas")
    )
    if redacted:
        raise ReplayRefusedError(
            f"dead letter {record_id} has redacted arguments ({', '.join(redacted)}); sending "
            f"{REDACTED!r} would not reproduce the call - send the task by hand instead"
        )
    return record


def _redacted_paths(value: Any, path: str) -> list[str]:
    if value == REDACTED:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _redacted_paths(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in _redacted_paths(v, f"{path}[{i}]")]
    return []


def _warnings(app: Any, record: Any) -> list[str]:
    _import_task_modules(app)
    task = app.tasks.get(record.task_name) if record.task_name else None
    if task is None:
        return [f"task {record.task_name!r} is not registered in this app; a worker must know it"]
    bound = getattr(type(task), "_xsm_bound", None)
    current = getattr(getattr(bound, "machine", None), "structure_hash", None)
    if current is not None and record.machine_hash and current != record.machine_hash:
        return ["the task's retry chart changed since it failed; the replay runs the new one"]
    return []


def _import_task_modules(app: Any) -> None:
    """Import the modules a worker imports at start (``autodiscover_tasks``, ``imports``).

    Outside a worker nobody has, so an autodiscovered task would look unregistered.
    """
    try:
        app.loader.import_default_modules()
    except Exception:  # a project module that fails here fails in the worker too
        return
