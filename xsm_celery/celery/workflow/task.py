"""The Celery task that runs a workflow's steps: retries, outages and dead letters.

One task per workflow (``xsm.workflow.<name>``), acknowledged late and requeued when its
worker is lost, so a message whose step never committed comes back; one whose step did
commit is answered from the inbox. Its arguments are ``(key, message)``; a task a step
dispatched completes it through ``link`` as ``(result, key, message)``.

What goes wrong is told apart as the project's rules say:

* an outage or a busy key (``StoreUnavailableError``, ``LockTimeoutError``,
  ``ConflictError``) is retried with a short countdown and never counted;
* a failing step (an action or guard raised, a value the store refused, a corrupt snapshot)
  is counted and retried by the workflow's ``RetryPolicy``; when the policy gives up, a dead
  letter with the event, the error chain and the instance's snapshot is written, and the
  task fails. ``replay_task`` (CLI, Django admin) sends the same message again.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from xsm_celery.celery.spool import DeadLetterSpool, dead_letter_id
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.workflow.lost import LOST_KWARG, RUNS_KWARG, count_lost_runs, mark_run
from xsm_celery.celery.workflow.step import Message, StepOutcome, run_step
from xsm_celery.engine import DEFAULT_REDACT_KEYS, redact
from xsm_celery.errors import (
    ConflictError,
    LockTimeoutError,
    SnapshotError,
    StoreError,
    StoreUnavailableError,
    TimeLimitKilled,
    WorkerLost,
    WorkflowStepError,
)
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns import DeadLetter, DeadLetterReason
from xsm_celery.patterns.error_chain import error_entry

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.api import Workflow

__all__ = ["OUTAGE_RETRY_MAX_S", "parse_arguments", "run_step_task"]

logger = logging.getLogger("xsm_celery.workflow")

#: Longest countdown between two tries of a step that met an outage or a busy key.
OUTAGE_RETRY_MAX_S = 5.0

_UNCOUNTED = (StoreUnavailableError, LockTimeoutError, ConflictError)


def parse_arguments(args: Sequence[Any]) -> tuple[str, Message]:
    """``(key, message)`` from the task's arguments, with a link's result prepended or not.

    Raises:
        WorkflowStepError: the arguments are not a key and a message.
    """
    if len(args) == 3:
        result, key, raw = args
        if isinstance(raw, dict):
            raw = {**raw, "data": result}
    elif len(args) == 2:
        key, raw = args
    else:
        raise WorkflowStepError(
            f"a workflow step task takes (key, message), got {len(args)} arguments; send "
            "events with workflow.send(key, 'EVENT')"
        )
    if not isinstance(key, str) or not key:
        raise WorkflowStepError(f"workflow instance key must be a non-empty string: {key!r:.80}")
    return key, Message.from_dict(raw)


def run_step_task(workflow: Workflow, task: Any, args: Sequence[Any], kwargs: dict[str, Any]
                  ) -> dict[str, Any]:  # fmt: skip
    """The body of the step task: run the step, or retry, defer or dead-letter it."""
    failures = int(kwargs.get("failures") or 0)
    errors = list(kwargs.get("errors") or [])
    try:
        key, message = parse_arguments(args)
    except WorkflowStepError as exc:
        _dead_letter(workflow, task, args, None, "", errors=[*errors, _entry("message", exc)],
                     attempts=failures + 1, reason=DeadLetterReason.CORRUPT)  # fmt: skip
        raise
    lost = count_lost_runs(workflow, task, key, message, kwargs)
    if lost.new:
        errors.extend(_entry("worker", error, message) for error in lost.new)
        carried = {"failures": failures, "errors": errors, LOST_KWARG: lost.total,
                   RUNS_KWARG: lost.runs}  # fmt: skip
        _give_up_or_retry(workflow, task, args, key=key, message=message, cause=lost.new[-1],
                          carried=carried)
    run = mark_run(workflow, task, lost)
    try:
        outcome = run_step(workflow, key, message)
    except _UNCOUNTED as exc:
        retries = int(getattr(task.request, "retries", 0) or 0)
        countdown = min(OUTAGE_RETRY_MAX_S, 0.05 * 2 ** min(retries, 8)) * (0.5 + random.random())
        emit(FactKind.WORKFLOW_STEP_FAILED, workflow=workflow.name, outcome="deferred",
             error=type(exc).__name__)  # fmt: skip
        logger.info("workflow %s[%s]: %s; step retried in %.2f s", workflow.name, key,
                    type(exc).__name__, countdown)  # fmt: skip
        raise task.retry(args=list(args), kwargs={**kwargs, RUNS_KWARG: run},
                         countdown=countdown, max_retries=None, exc=exc) from exc  # fmt: skip
    except (WorkflowStepError, SnapshotError, StoreError) as exc:
        cause = exc.__cause__ if isinstance(exc, WorkflowStepError) and exc.__cause__ else exc
        errors.append(_entry("action" if cause is not exc else "step", cause, message))
        carried = {"failures": failures + 1, "errors": errors, LOST_KWARG: lost.total,
                   RUNS_KWARG: run}  # fmt: skip
        _give_up_or_retry(workflow, task, args, key=key, message=message, cause=cause,
                          carried=carried, raised=exc)
    return _result(outcome)


def _give_up_or_retry(
    workflow: Workflow, task: Any, args: Sequence[Any], *, key: str, message: Message,
    cause: BaseException, carried: dict[str, Any], raised: BaseException | None = None,
) -> NoReturn:  # fmt: skip
    """Retry the step by the policy (failures and lost runs both count), or dead-letter it.

    ``raised`` is what the step raised (``cause`` is the action's error inside it); a lost
    run raised nothing, so ``cause`` ends the task when the policy gives up.
    """
    policy = workflow.retry_policy
    counted = int(carried["failures"]) + int(carried[LOST_KWARG])
    error = raised if raised is not None else cause
    if counted < policy.max_attempts and policy.should_retry(cause):
        countdown = policy.delay_ms(counted) / 1000.0
        emit(FactKind.WORKFLOW_STEP_FAILED, workflow=workflow.name, outcome="retry",
             error=type(cause).__name__)  # fmt: skip
        raise task.retry(args=list(args), kwargs=carried, countdown=countdown, max_retries=None,
                         exc=error) from error  # fmt: skip
    if isinstance(cause, TimeLimitKilled):
        reason = DeadLetterReason.TIME_LIMIT
    elif isinstance(cause, WorkerLost):
        reason = DeadLetterReason.WORKER_LOST
    elif policy.should_retry(cause):
        reason = DeadLetterReason.TASK_EXHAUSTED
    else:
        reason = DeadLetterReason.NON_RETRYABLE
    _dead_letter(workflow, task, args, message, key, errors=list(carried["errors"]),
                 attempts=counted, reason=reason)  # fmt: skip
    emit(FactKind.WORKFLOW_STEP_FAILED, workflow=workflow.name, outcome="dead_letter",
         error=type(cause).__name__)  # fmt: skip
    raise error


def _result(outcome: StepOutcome) -> dict[str, Any]:
    return {
        "key": outcome.key,
        "message": outcome.message_id,
        "outcome": outcome.outcome,
        "state_ids": sorted(outcome.state_ids),
        "changed": outcome.changed,
    }


def _entry(source: str, error: BaseException, message: Message | None = None) -> dict[str, str]:
    name = (message.type or message.kind) if message is not None else "message"
    return error_entry(source, name, error)


def _dead_letter(
    workflow: Workflow, task: Any, args: Sequence[Any], message: Message | None, key: str, *,
    errors: list[dict[str, str]], attempts: int, reason: DeadLetterReason,
) -> None:  # fmt: skip
    """Write the step's dead letter through the spool: a store outage keeps it on local disk.

    Its id is one per task run (``dead_letter_id``), so a worker killed during the write
    leaves one record, not two.
    """
    keys = DEFAULT_REDACT_KEYS + tuple(stores_for(workflow.app).settings.redact_keys)
    snapshot: dict[str, Any] = {}
    state_id = ""
    if key:
        try:
            record = workflow.stores().snapshots.load(workflow.store_key(key))
        except StoreError:
            record = None
        if record is not None:
            snapshot = json.loads(record.snapshot)
            state_id = ",".join(snapshot.get("state_ids") or [])
    machine = workflow.machine
    event = {"type": message.type or message.kind, "payload": dict(message.payload)} if message \
        else {"type": "", "payload": {}}  # fmt: skip
    letter = DeadLetter(
        id=dead_letter_id(str(task.request.id), attempts),
        machine_id=str(machine.id),
        state_id=state_id,
        event=redact(event, keys),
        attempts=attempts,
        errors=errors,
        snapshot=redact(snapshot, keys),
        taken_at=time.time(),
        reason=reason.value,
        machine_hash=str(machine.structure_hash),
        machine_version=None if machine.version is None else str(machine.version),
        task_name=str(task.name),
        task_id=str(task.request.id),
        task_args=redact([key, message.to_dict()] if message else list(args), keys),
        task_kwargs={},
        hostname=getattr(task.request, "hostname", None),
    )
    spool = DeadLetterSpool(stores_for(workflow.app).settings.dead_letter_spool)
    spool.keep(letter)
    try:
        store = stores_for(workflow.app).dead_letters()
        spool.write_through(store, letter)
    except Exception:
        logger.warning("dead-letter store failed; the dead letter %s of workflow %s[%s] is kept "
                       "in the spool %s and written when the store is back", letter.id,
                       workflow.name, key, spool.directory, exc_info=True)  # fmt: skip
        emit(FactKind.DEAD_LETTER_SPOOLED, task=str(task.name), reason=letter.reason)
        return
    spool.flush(store)
