"""``replay_task``: send a dead-lettered task again, with its arguments and a fresh chart.

A replay is an operator's decision, so it is a dry run unless asked otherwise, a real one
needs a reason, and it is audited in the store next to the record. The task gets a new id
(the dead one keeps its ``FAILURE`` result) and no ``xsm_chart`` header, so its chart starts
over at attempt 1, and it keeps the chain and callbacks the original message carried (a
chord member is refused: it cannot rejoin its chord). A record whose arguments were redacted
is refused: sending ``"***"`` in place of a card token would only fail again, or worse,
succeed with the wrong value.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from celery.utils import uuid

from xsm_celery.celery.canvas import replay_options
from xsm_celery.engine.redact import REDACTED
from xsm_celery.errors import ReplayRefusedError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.operators import current_actor

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
            redacted arguments, or a real replay without a reason.
    """
    record = _replayable(store, record_id)
    options = replay_options(record_id, (record.event or {}).get("payload"))
    args, kwargs = list(record.task_args or []), dict(record.task_kwargs or {})
    warnings = _warnings(app, record)
    name = str(record.task_name)
    if dry_run:
        outcome = f"dry run: would send {name} with args={args!r} kwargs={kwargs!r}"
        return TaskReplayResult(record_id, True, outcome, name, None, args, kwargs, warnings)
    if not reason or not reason.strip():
        raise ReplayRefusedError(
            f"replaying dead letter {record_id} needs a reason (reason='...'); it is audited"
        )
    task_id = uuid()
    app.send_task(name, args=args, kwargs=kwargs, task_id=task_id, **options)
    store.mark_resolved(record_id, time.time())
    outcome = f"sent {name} as task {task_id}"
    store.audit(record_id, "replay", actor=current_actor(actor), reason=reason, outcome=outcome)
    emit(FactKind.DEAD_LETTER_REPLAYED, source="task", task=name, task_id=task_id,
         record_id=record_id, reason=record.reason)  # fmt: skip
    return TaskReplayResult(record_id, False, outcome, name, task_id, args, kwargs, warnings)


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
            f"dead letter {record_id} was already resolved at {record.resolved_at}; "
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
