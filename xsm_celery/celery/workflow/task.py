"""The Celery task that runs a workflow's steps: retries, outages and dead letters.

One task per workflow (``xsm.workflow.<name>``), acknowledged late and requeued when its
worker is lost, so a message whose step never committed comes back; one whose step did
commit is answered from the inbox. Its arguments are ``(key, message)``; a task a step
dispatched completes it through ``link`` as ``(result, key, message)``. Its keyword
arguments are ignored: nothing a producer writes decides a policy.

Every message ends in one of three ways: applied once, answered as a duplicate or stale,
or one dead letter. What goes wrong is told apart as the project's rules say:

* an outage or a busy key (``StoreUnavailableError``, ``LockTimeoutError``,
  ``ConflictError``) is retried with a short countdown and never counted, for as long as
  ``xsm_workflow_outage_max_s`` allows (a day by default); then the message becomes a
  ``deferred_too_long`` dead letter;
* a failing step (an action or guard raised, a value the store refused, a corrupt snapshot)
  and a lost run (its worker died) are counted in the step's ledger in the store
  (``ledger``) and retried by the workflow's ``RetryPolicy`` exactly: ``max_attempts=5``
  means five runs. Then a dead letter with the event, the error chain and the instance's
  snapshot is written, and the task fails. Celery's own ``max_retries`` never ends a step:
  the task is registered with ``max_retries=None``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from xsm_celery.celery.deadletter.spool import dead_letter_id
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.workflow.dead_letters import workflow_dead_letter
from xsm_celery.celery.workflow.ledger import StepLedger, read_ledger, write_ledger
from xsm_celery.celery.workflow.lost import count_lost_runs, mark_ended, mark_run
from xsm_celery.celery.workflow.step import Message, StepOutcome, run_step
from xsm_celery.engine import DEFAULT_REDACT_KEYS, redact
from xsm_celery.errors import (
    ConflictError,
    DeferredTooLongError,
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
from xsm_celery.patterns.dead_letter.workflow import workflow_topic
from xsm_celery.patterns.error_chain import error_entry

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.context import StepContext

__all__ = ["OUTAGE_RETRY_MAX_S", "parse_arguments", "run_step_task"]

logger = logging.getLogger("xsm_celery.workflow")

#: Longest countdown between two tries of a step that met an outage or a busy key.
OUTAGE_RETRY_MAX_S = 5.0

#: Marker suffix of the epoch second a step's first deferral happened.
DEFERRED_SUFFIX = ":deferred"

_UNCOUNTED = (StoreUnavailableError, LockTimeoutError, ConflictError)

#: First deferral of each task id seen by this process, for when the markers are down too.
_local_deferrals: dict[str, float] = {}
_local_lock = threading.Lock()


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
            "events with ctx.send(key, 'EVENT')"
        )
    if not isinstance(key, str) or not key:
        raise WorkflowStepError(f"workflow instance key must be a non-empty string: {key!r:.80}")
    return key, Message.from_dict(raw)


def run_step_task(
    ctx: StepContext, task: Any, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The body of the step task: run the step, or retry, defer or dead-letter it.

    ``kwargs`` is accepted for compatibility with messages of earlier versions and ignored.
    """
    try:
        key, message = parse_arguments(args)
        ctx.store_key(key)
    except (WorkflowStepError, StoreError) as exc:
        _dead_letter(
            ctx,
            task,
            args,
            None,
            "",
            errors=[_entry("message", exc)],
            attempts=1,
            reason=DeadLetterReason.CORRUPT,
        )
        raise
    app = ctx.app
    lost = count_lost_runs(app, task, lambda: _committed(ctx, key, message))
    if lost.new:
        entries = [_entry("worker", error, message) for error in lost.new]
        ledger = _count(ctx, task, args, key, message, change=lambda led: led.with_lost(entries))
        mark_ended(app, task, lost.runs)
        _give_up_or_retry(
            ctx, task, args, key=key, message=message, ledger=ledger, cause=lost.new[-1]
        )
    run = mark_run(app, task, lost)
    try:
        outcome = run_step(ctx, key, message)
    except _UNCOUNTED as exc:
        mark_ended(app, task, run)
        _defer(ctx, task, args, key=key, message=message, error=exc)
    except (WorkflowStepError, SnapshotError, StoreError) as exc:
        cause = exc.__cause__ if isinstance(exc, WorkflowStepError) and exc.__cause__ else exc
        entry = _entry("action" if cause is not exc else "step", cause, message)
        ledger = _count(
            ctx, task, args, key, message, change=lambda led: led.with_failure(entry), run=run
        )
        mark_ended(app, task, run)
        _give_up_or_retry(
            ctx, task, args, key=key, message=message, ledger=ledger, cause=cause, raised=exc
        )
    return _result(outcome)


def _count(
    ctx: StepContext,
    task: Any,
    args: Sequence[Any],
    key: str,
    message: Message,
    *,
    change: Any,
    run: int | None = None,
) -> StepLedger:
    """Apply ``change`` to the message's ledger in the store; an outage defers the run."""
    store_key = ctx.store_key(key)
    inbox = ctx.stores().inbox
    try:
        ledger: StepLedger = change(read_ledger(inbox, store_key, message.id))
        write_ledger(inbox, store_key, message.id, ledger, ctx.inbox_ttl_s)
    except _UNCOUNTED as outage:
        if run is not None:
            mark_ended(ctx.app, task, run)
        _defer(ctx, task, args, key=key, message=message, error=outage)
    return ledger


def _defer(
    ctx: StepContext,
    task: Any,
    args: Sequence[Any],
    *,
    key: str,
    message: Message,
    error: BaseException,
) -> NoReturn:
    """Retry an outage or a busy key uncounted, until ``xsm_workflow_outage_max_s`` ran out."""
    request = task.request
    if getattr(request, "is_eager", False):
        raise error  # an eager run has no queue to wait in: the caller sees the outage
    bound = stores_for(ctx.app).settings.workflow_outage_max_s
    waited = time.time() - _deferred_since(ctx.app, str(request.id))
    if waited > bound:
        chain = [_entry("store", error, message)]
        _dead_letter(
            ctx,
            task,
            args,
            message,
            key,
            errors=chain,
            attempts=0,
            reason=DeadLetterReason.DEFERRED_TOO_LONG,
        )
        emit(
            FactKind.WORKFLOW_STEP_FAILED,
            workflow=ctx.name,
            outcome="dead_letter",
            error=type(error).__name__,
        )
        raise DeferredTooLongError(
            f"workflow {ctx.name}[{key}]: the step met {type(error).__name__} for "
            f"{waited:.0f} s, over xsm_workflow_outage_max_s={bound:g}; its message is a "
            "dead letter - restore the store, then replay it",
            reason="outage",
        ) from error
    retries = int(getattr(request, "retries", 0) or 0)
    countdown = min(OUTAGE_RETRY_MAX_S, 0.05 * 2 ** min(retries, 8)) * (0.5 + random.random())
    emit(
        FactKind.WORKFLOW_STEP_FAILED,
        workflow=ctx.name,
        outcome="deferred",
        error=type(error).__name__,
    )
    logger.info(
        "workflow %s[%s]: %s; step retried in %.2f s (uncounted)",
        ctx.name,
        key,
        type(error).__name__,
        countdown,
    )
    raise task.retry(args=list(args), kwargs={}, countdown=countdown, exc=error) from error


def _deferred_since(app: Any, task_id: str) -> float:
    """When this task id was first deferred: kept in the attempt markers, else in memory."""
    now = time.time()
    try:
        markers = stores_for(app).markers()
        since = markers.started(task_id + DEFERRED_SUFFIX)
        if since is None:
            markers.mark(task_id + DEFERRED_SUFFIX, int(now))
            return now
        return min(float(since), now)
    except Exception:
        with _local_lock:
            if len(_local_deferrals) > 10_000:
                _local_deferrals.clear()
            return _local_deferrals.setdefault(task_id, now)


def _give_up_or_retry(
    ctx: StepContext,
    task: Any,
    args: Sequence[Any],
    *,
    key: str,
    message: Message,
    ledger: StepLedger,
    cause: BaseException,
    raised: BaseException | None = None,
) -> NoReturn:
    """Retry the step by the policy (failures and lost runs both count), or dead-letter it.

    ``raised`` is what the step raised (``cause`` is the action's error inside it); a lost
    run raised nothing, so ``cause`` ends the task when the policy gives up.
    """
    policy = ctx.retry_policy
    counted = ledger.counted
    error = raised if raised is not None else cause
    if counted < policy.max_attempts and policy.should_retry(cause):
        countdown = policy.delay_ms(counted) / 1000.0
        emit(
            FactKind.WORKFLOW_STEP_FAILED,
            workflow=ctx.name,
            outcome="retry",
            error=type(cause).__name__,
        )
        raise task.retry(args=list(args), kwargs={}, countdown=countdown, exc=error) from error
    if isinstance(cause, TimeLimitKilled):
        reason = DeadLetterReason.TIME_LIMIT
    elif isinstance(cause, WorkerLost):
        reason = DeadLetterReason.WORKER_LOST
    elif policy.should_retry(cause):
        reason = DeadLetterReason.TASK_EXHAUSTED
    else:
        reason = DeadLetterReason.NON_RETRYABLE
    _dead_letter(
        ctx, task, args, message, key, errors=list(ledger.errors), attempts=counted, reason=reason
    )
    emit(
        FactKind.WORKFLOW_STEP_FAILED,
        workflow=ctx.name,
        outcome="dead_letter",
        error=type(cause).__name__,
    )
    raise error


def _committed(ctx: StepContext, key: str, message: Message) -> bool:
    """Whether the inbox holds this message's receipt: the lost run had committed."""
    try:
        entry = ctx.stores().inbox.get(ctx.store_key(key), message.id)
    except Exception:
        return False
    # An entry without a receipt is a delivery in flight (or one that died holding it).
    return entry is not None and entry.receipt is not None


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
    ctx: StepContext,
    task: Any,
    args: Sequence[Any],
    message: Message | None,
    key: str,
    *,
    errors: list[dict[str, str]],
    attempts: int,
    reason: DeadLetterReason,
) -> None:
    """Write the step's dead letter through the spool: a store outage keeps it on local disk.

    Its id is one per task run (``dead_letter_id``), so a worker killed during the write
    leaves one record, not two. Its topic names the workflow and key
    (``workflow:<name>:<key>``), and it is reported as every dead letter is (log line,
    ``xsm_dead_letters_total``, Celery event).
    """
    keys = DEFAULT_REDACT_KEYS + tuple(stores_for(ctx.app).settings.redact_keys)
    snapshot: dict[str, Any] = {}
    state_id = ""
    if key:
        try:
            record = ctx.stores().snapshots.load(ctx.store_key(key))
        except StoreError:
            record = None
        if record is not None:
            snapshot = json.loads(record.snapshot)
            state_id = ",".join(snapshot.get("state_ids") or [])
    machine = ctx.machine
    event = (
        {"type": message.type or message.kind, "payload": dict(message.payload)}
        if message
        else {"type": "", "payload": {}}
    )
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
        topic=workflow_topic(ctx.name, key),
        machine_hash=str(machine.structure_hash),
        machine_version=None if machine.version is None else str(machine.version),
        task_name=str(task.name),
        task_id=str(task.request.id),
        task_args=redact([key, message.to_dict()] if message else list(args), keys),
        task_kwargs={},
        hostname=getattr(task.request, "hostname", None),
    )
    workflow_dead_letter(ctx, letter, key=key)
