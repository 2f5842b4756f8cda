"""One workflow step: lock the instance, answer a redelivery, apply one message, commit.

A step holds the instance's lock inside its store's transaction (``workflow_session``: the
instance row's lock on SQLAlchemy's PostgreSQL, SQLite's write lock, an advisory lock in a
Django ``atomic`` block) for load, act and save, so two messages for one key never
interleave. Inside that transaction it writes, or rolls back together: the snapshot, the
inbox receipt of the message's id, a row per timer the step armed and per Celery task it
dispatches (``payloads``), the deletion of the rows it settles (a timer that fired or was
cancelled, a task step whose completion arrived or whose state was left), the chart's outbox
rows, the transition log and (Django) the instance summary. Only after the commit are tasks
dispatched, countdown timers published and left invocations revoked; a row stays until the
step that applies its message deletes it, so a message that was never published or that the
broker lost is re-published by the Beat scan (``recovery``).

A message for an invocation that is no longer active, or for an unknown instance, is stale:
nothing is saved, it is logged and counted (``STALE_COMPLETION``).
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.task.secrets import mask_exception
from xsm_celery.celery.workflow.context import TASK_ATTEMPTS_KEY, StepContext
from xsm_celery.celery.workflow.dead_letters import workflow_dead_letter
from xsm_celery.celery.workflow.messages import DEFAULT_TASK_STEP_TIMEOUT_S, Dispatch, Message
from xsm_celery.celery.workflow.payloads import (
    deadline_id,
    dispatch_spec,
    send_spec,
    timer_spec,
    timer_task_id,
)
from xsm_celery.celery.workflow.session import StepSession, generic_session
from xsm_celery.engine import (
    DEFAULT_REDACT_KEYS,
    EngineEvent,
    Event,
    InterpreterView,
    PluginBase,
    Receipt,
)
from xsm_celery.engine.redact import mask_text, secret_values
from xsm_celery.errors import WorkflowStepError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.dead_letter.workflow import workflow_topic
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY, error_entry
from xsm_celery.persistence.idempotency import receipt_to_json
from xsm_celery.persistence.locks import OptimisticLock
from xsm_celery.persistence.persisted import persisted
from xsm_celery.persistence.timers import deadlines_of

__all__ = [
    "DEFAULT_TASK_STEP_TIMEOUT_S",
    "INVOCATIONS_KEY",
    "Dispatch",
    "Message",
    "StepEffects",
    "StepOutcome",
    "TimerSend",
    "buffer_dead_letter",
    "current_step",
    "run_step",
]

logger = logging.getLogger("xsm_celery.workflow")

#: Private context key of the Celery tasks an instance's active invocations wait for.
INVOCATIONS_KEY = "_xsm_invocations"


_current: contextvars.ContextVar[StepEffects | None] = contextvars.ContextVar(
    "xsm_workflow_step", default=None
)


@dataclass
class TimerSend:
    """A timer the step armed: its message, its delay, and when its row is due.

    A countdown timer's row is due the recovery grace after the timer (the countdown
    normally fires it first); a long timer's row is due at the timer, since no message
    carries it.
    """

    task_id: str
    payload: dict[str, Any]
    delay_s: float
    row_due_at: float
    durable: bool


@dataclass
class StepEffects:
    """What one step writes beside its snapshot, and does once it committed."""

    ctx: StepContext
    key: str
    dispatches: list[Dispatch] = field(default_factory=list)
    #: The send spec of each dispatch, built once for its row and its publish.
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    revokes: list[str] = field(default_factory=list)
    timers: list[TimerSend] = field(default_factory=list)
    dead_letters: list[Any] = field(default_factory=list)
    #: Task ids whose rows this step settles: timers that fired or were cancelled, task
    #: steps whose completion arrived or whose state was left.
    settled: list[str] = field(default_factory=list)

    def write_rows(self, timers: Any, now: float) -> None:
        """Inside the transaction: a row per timer and per task step, until it is applied.

        A task step's row is due ``timeout_s`` after its dispatch, a timer's as
        ``TimerSend`` says; the Beat scan re-publishes whichever is still there then
        (``recovery``). Rows this step settled are deleted first, so a timer that came
        early and is armed again gets its row back.
        """
        for task_id in self.settled:
            timers.delete_key(task_id)
        for dispatch in self.dispatches:
            spec = self.specs[dispatch.task_id] = dispatch_spec(self.ctx, dispatch, sent_at=now)
            timers.schedule(dispatch.task_id, now + dispatch.timeout_s, spec)
        for timer in self.timers:
            timers.schedule(timer.task_id, timer.row_due_at, timer.payload)


def current_step() -> StepEffects | None:
    """The step running on this thread, if any (``celery_service`` records its tasks here)."""
    return _current.get()


def buffer_dead_letter(record: Any) -> None:
    """The dead-letter plugin's sink: keep the record until the step commits."""
    step = current_step()
    if step is None:
        logger.error("dead letter outside a workflow step, not stored: %s", record.to_json())
        return
    step.dead_letters.append(record)


@dataclass(frozen=True)
class StepOutcome:
    """What a step did: ``applied``, ``started``, ``duplicate``, ``stale`` or ``ignored``."""

    key: str
    message_id: str
    outcome: str
    state_ids: frozenset[str] = frozenset()
    changed: bool = False
    version: int = 0


class _Session:
    """The snapshot store as ``persisted()`` sees it: ``load`` answers the record the session
    read, ``save`` goes through the session (which may hold it for ``finish``)."""

    def __init__(self, store: Any, session: StepSession) -> None:
        self._store = store
        self._session = session

    def load(self, key: str) -> Any:
        return self._session.record

    def save(
        self,
        key: str,
        snapshot: str,
        *,
        expected_version: int | None = None,
        machine_version: str = "",
    ) -> int:
        return self._session.save(
            key, snapshot, expected_version=expected_version, machine_version=machine_version
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _Stale(Exception):
    """Leave the step without saving: the message no longer applies."""


class _Recorder(PluginBase):
    """Collects the step's transitions, fired timers and errors."""

    def __init__(self, initial: dict[str, Any] | None = None) -> None:
        self.initial = initial or {}
        self.transitions: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.fired: list[str] = []

    def on_interpreter_start(self, i: InterpreterView) -> None:
        """A new instance: merge ``start(key, context=...)`` before the entry actions run."""
        i.context.update(self.initial)

    def on_transition(
        self, i: InterpreterView, from_states: Any, to_states: Any, transition: Any
    ) -> None:
        self.transitions.append(
            {
                "event": getattr(transition, "event", None) or "",
                "source": sorted(s.id for s in from_states if s.type in ("atomic", "final")),
                "target": sorted(s.id for s in to_states if s.type in ("atomic", "final")),
                "at": time.time(),
            }
        )

    def on_event_received(self, i: InterpreterView, event: Event) -> None:
        if event.type.startswith("after."):
            self.fired.append(event.type)

    def on_action_error(self, i: InterpreterView, action: Any, error: BaseException) -> None:
        self.errors.append(error)

    def on_guard_error(
        self, i: InterpreterView, guard_name: str, event: Event, error: BaseException
    ) -> None:
        self.errors.append(error)


def run_step(ctx: StepContext, key: str, message: Message) -> StepOutcome:
    """Apply ``message`` to instance ``key`` of ``workflow`` in one transaction.

    Raises:
        WorkflowStepError: an action or guard raised (nothing was saved); its cause is the
            error. Store errors (``LockTimeoutError``, ``StoreUnavailableError``) propagate.
    """
    effects = StepEffects(ctx, key)
    token = _current.set(effects)
    started = time.perf_counter()
    try:
        outcome, recorder, before = _locked_step(ctx, key, message, effects)
    finally:
        _current.reset(token)
    if outcome.outcome in ("applied", "started"):
        _publish_effects(ctx, effects)
        _report(ctx, message, recorder, before=before, outcome=outcome)
    emit(
        FactKind.WORKFLOW_STEP,
        workflow=ctx.name,
        message_kind=message.kind,
        outcome=outcome.outcome,
        duration_s=time.perf_counter() - started,
    )
    return outcome


def _locked_step(
    ctx: StepContext, key: str, message: Message, effects: StepEffects
) -> tuple[StepOutcome, _Recorder, list[dict[str, Any]]]:
    stores = ctx.stores()
    store_key = ctx.store_key(key)
    recorder = _Recorder(dict(message.payload) if message.kind == "start" else None)
    open_session = stores.session or partial(generic_session, stores)
    with open_session(
        store_key, message.id, timeout=ctx.lock_timeout_s, ttl_s=ctx.inbox_ttl_s
    ) as session:
        if session.duplicate:
            logger.info("workflow %s[%s]: message %s already applied", ctx.name, key, message.id)
            return StepOutcome(key, message.id, "duplicate"), recorder, []
        record = session.record
        if record is None and message.kind in ("timer", "done", "error"):
            _stale(ctx, key, message, "unknown instance")
            return StepOutcome(key, message.id, "stale"), recorder, []
        before = deadlines_of(record.snapshot) if record is not None else []
        receipt: list[Receipt] = []
        try:
            pending = {deadline_id(d) for d in before}
            if message.kind == "timer" and _timer_id_of(message) not in pending:
                raise _Stale("its timer is no longer pending")
            with _instance(
                ctx,
                store_key,
                message,
                recorder=recorder,
                receipt=receipt,
                effects=effects,
                session=session,
            ) as interp:
                _apply(
                    ctx,
                    key,
                    message,
                    interp,
                    recorder=recorder,
                    receipt=receipt,
                    settled=effects.settled,
                )
                _reconcile(ctx, interp, effects)
                _arm_timers(ctx, key, interp, before=before, effects=effects, message=message)
        except _Stale as why:
            _stale(ctx, key, message, str(why))
            return StepOutcome(key, message.id, "stale"), recorder, before
        result = receipt[0] if receipt else Receipt(frozenset(interp.current_state_ids), False)
        kind = "started" if record is None else "applied"
        version = (record.version if record is not None else 0) + 1
        outcome = StepOutcome(key, message.id, kind, result.state_ids, result.changed, version)
    return outcome, recorder, before


@contextmanager
def _instance(
    ctx: StepContext,
    store_key: str,
    message: Message,
    *,
    recorder: _Recorder,
    receipt: list[Receipt],
    effects: StepEffects,
    session: StepSession,
) -> Iterator[Any]:
    """``persisted()`` in the session already open, writing the step's rows before commit."""
    stores = ctx.stores()

    def write_rows(interp: Any) -> None:
        effects.write_rows(stores.timers, time.time())
        result = receipt[0] if receipt else Receipt(frozenset(interp.current_state_ids), False)
        summary = ctx.summary(store_key, interp) if stores.journal is not None else {}
        session.finish(
            receipt_to_json(result),
            summary,
            [
                {"workflow": ctx.name, "key": ctx.user_key(store_key), "message": message.kind, **t}
                for t in recorder.transitions
            ],
        )

    with persisted(
        _Session(stores.snapshots, session),
        store_key,
        ctx.machine,
        lock=OptimisticLock(0),
        plugins=[recorder, *ctx.plugins()],
        before_commit=[write_rows],
    ) as interp:
        yield interp


def _apply(
    ctx: StepContext,
    key: str,
    message: Message,
    interp: Any,
    *,
    recorder: _Recorder,
    receipt: list[Receipt],
    settled: list[str],
) -> None:
    """Deliver the message to the loaded instance; an action error aborts the step."""
    if message.kind == "event":
        if interp.status != "running":
            logger.warning(
                "workflow %s[%s] is %s; event %r ignored",
                ctx.name,
                key,
                interp.status,
                message.type,
            )
        else:
            receipt.append(interp.send(Event(message.type, dict(message.payload)), wait=True))
    elif message.kind in ("done", "error"):
        _complete(interp, message, settled)
    if recorder.errors:
        secrets = _secrets(ctx, message, interp)
        for failed in recorder.errors:
            mask_exception(failed, secrets)
        error = recorder.errors[0]
        text = mask_text(str(error), secrets)
        raise WorkflowStepError(
            f"workflow {ctx.name}[{key}]: {type(error).__name__} in a step on "
            f"{message.kind} {message.type or message.invoke!r}: {text}; nothing was saved"
        ) from error


def _secrets(ctx: StepContext, message: Message, interp: Any) -> tuple[str, ...]:
    """Values of the event payload and the context that redaction masks, for error texts.

    An action's exception often copies its input into its message (``f"card {number}
    declined"``); that text reaches the dead letter, the worker log and the result backend,
    so it is masked as a chart task's is.
    """
    keys = DEFAULT_REDACT_KEYS + tuple(stores_for(ctx.app).settings.redact_keys)
    context = {k: v for k, v in interp.context.items() if k != ERRORS_CONTEXT_KEY}
    return tuple(secret_values({"payload": message.payload, "context": context}, keys))


def _complete(interp: Any, message: Message, settled: list[str]) -> None:
    """Turn a Celery task's result into ``done.invoke.<id>`` / ``error.platform.<id>``."""
    waiting = interp.context.get(INVOCATIONS_KEY) or {}
    if interp.status != "running" or waiting.get(message.invoke) != message.dispatch:
        raise _Stale(f"invocation {message.invoke!r} task {message.dispatch} is not active")
    del waiting[message.invoke]
    settled.append(message.dispatch)
    interp.context.pop(TASK_ATTEMPTS_KEY, None)
    if message.kind == "done":
        event = EngineEvent(f"done.invoke.{message.invoke}", message.data, message.invoke)
    else:
        from xsm_celery.errors import ServiceTaskFailed

        info = message.data if isinstance(message.data, dict) else {}
        error = ServiceTaskFailed(
            task_name=str(info.get("task") or ""),
            error_type=str(info.get("type") or "Exception"),
            message=str(info.get("message") or ""),
        )
        chain = interp.context.setdefault(ERRORS_CONTEXT_KEY, [])
        if isinstance(chain, list):
            chain.append(error_entry("service", message.invoke, error))
        attempts = info.get("attempts")
        if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 0:
            interp.context[TASK_ATTEMPTS_KEY] = attempts
        event = EngineEvent(f"error.platform.{message.invoke}", error, message.invoke)
    interp.send_threadsafe(event)
    interp.tick()


def _active_invocations(ctx: StepContext, interp: Any) -> set[str]:
    """Ids of the invocations whose state is active now."""
    active: set[str] = set()
    leaves = interp.current_state_ids
    for invoke_id, state_id in ctx.invocations.items():
        if any(leaf == state_id or leaf.startswith(state_id + ".") for leaf in leaves):
            active.add(invoke_id)
    return active


def _reconcile(ctx: StepContext, interp: Any, effects: StepEffects) -> None:
    """Revoke tasks of invocations whose state was left; drop dispatches already stale."""
    waiting = interp.context.get(INVOCATIONS_KEY)
    active = _active_invocations(ctx, interp) if interp.status == "running" else set()
    if isinstance(waiting, dict):
        for invoke_id in [i for i in waiting if i not in active]:
            task_id = str(waiting.pop(invoke_id))
            effects.revokes.append(task_id)
            effects.settled.append(task_id)
        if not waiting:
            interp.context.pop(INVOCATIONS_KEY, None)
    current = interp.context.get(INVOCATIONS_KEY) or {}
    kept = [d for d in effects.dispatches if current.get(d.invoke_id) == d.task_id]
    dropped = {d.task_id for d in effects.dispatches} - {d.task_id for d in kept}
    effects.revokes[:] = [t for t in effects.revokes if t not in dropped]
    effects.dispatches[:] = kept


def _arm_timers(
    ctx: StepContext,
    key: str,
    interp: Any,
    *,
    before: list[dict[str, Any]],
    effects: StepEffects,
    message: Message,
) -> None:
    """Schedule the timers this step armed: countdown messages, or durable rows when long.

    A timer message that arrived before its due time (clock skew) re-arms its own timer.
    """
    if not interp.pending_timers():
        # The usual step arms no timer: no snapshot is built just to find none.
        effects.settled.extend(timer_task_id(ctx.name, key, d) for d in before)
        return
    fired = _timer_id_of(message) if message.kind == "timer" else None
    pending = {deadline_id(d) for d in before} - {fired}
    after = deadlines_of(interp.snapshot())
    still = {deadline_id(d) for d in after}
    # Rows of timers that fired or were cancelled go; one that fired early is armed again.
    effects.settled.extend(
        timer_task_id(ctx.name, key, d)
        for d in before
        if deadline_id(d) not in still or deadline_id(d) == fired
    )
    now = time.time()
    for deadline in after:
        if deadline_id(deadline) in pending:
            continue
        due = float(deadline["due_at_wall"])
        delay = max(0.0, due - now)
        task_id, payload = timer_spec(ctx, key, deadline)
        durable = delay > ctx.countdown_max_s
        row_due = due if durable else due + ctx.recovery_grace_s
        effects.timers.append(TimerSend(task_id, payload, delay, row_due, durable))
        emit(FactKind.TIMER_SCHEDULED, workflow=ctx.name, purpose="workflow", durable=durable)


def _timer_id_of(message: Message) -> tuple[str, str, float]:
    return (
        str(message.payload.get("state_id")),
        message.type,
        round(float(message.due_at or 0.0), 3),
    )


def _publish_effects(ctx: StepContext, effects: StepEffects) -> None:
    """After the commit: dispatch tasks, publish countdowns, revoke, store dead letters."""
    for dispatch in effects.dispatches:
        try:
            send_spec(ctx.app, dispatch.task_id, effects.specs[dispatch.task_id])
        except Exception:
            logger.exception(
                "workflow %s[%s]: dispatching %s failed; Beat sends it in %.0f s",
                ctx.name,
                effects.key,
                dispatch.task_name,
                dispatch.timeout_s,
            )
    eager = bool(effects.timers) and bool(ctx.app.conf.task_always_eager)
    for timer in effects.timers:
        if timer.durable or eager:
            continue
        try:
            send_spec(ctx.app, timer.task_id, timer.payload, countdown=timer.delay_s)
        except Exception:
            logger.exception(
                "workflow %s[%s]: publishing a timer failed; Beat sends it", ctx.name, effects.key
            )
    for task_id in effects.revokes:
        ctx.revoke(task_id)
    for record in effects.dead_letters:
        named = replace(record, topic=workflow_topic(ctx.name, effects.key))
        workflow_dead_letter(ctx, named, key=effects.key)


def _stale(ctx: StepContext, key: str, message: Message, why: str) -> None:
    """Log and count a message that no longer applies, and drop any row still waiting for it.

    Its row was normally deleted by the step that settled it; one written by an earlier
    version, or left by a race, would otherwise be re-published by every Beat scan.
    """
    logger.info(
        "workflow %s[%s]: stale %s message %s ignored (%s)",
        ctx.name,
        key,
        message.kind,
        message.id,
        why,
    )
    emit(FactKind.STALE_COMPLETION, workflow=ctx.name, message_kind=message.kind)
    row_key = message.id if message.kind == "timer" else message.dispatch
    if not row_key:
        return
    try:
        ctx.stores().timers.delete_key(row_key)
    except Exception:
        logger.info(
            "could not drop the row of stale message %s; the Beat scan re-sends it "
            "and it is ignored again",
            message.id,
            exc_info=True,
        )


def _state_names(state_ids: list[str]) -> str:
    """Active leaf states without the machine id: ``["order.paying"]`` is ``"paying"``."""
    return ",".join(i.split(".", 1)[1] if "." in i else i for i in state_ids)


def _report(
    ctx: StepContext,
    message: Message,
    recorder: _Recorder,
    *,
    before: list[dict[str, Any]],
    outcome: StepOutcome,
) -> None:
    for transition in recorder.transitions:
        emit(
            FactKind.WORKFLOW_TRANSITION,
            workflow=ctx.name,
            event=str(transition["event"]).split(".", 1)[0],
            from_state=_state_names(transition["source"]),
            to_state=_state_names(transition["target"]),
        )
    if recorder.fired:
        now = time.time()
        dues = {str(d.get("event_type")): float(d["due_at_wall"]) for d in before}
        for event_type in recorder.fired:
            due = dues.get(event_type, message.due_at or now)
            emit(
                FactKind.TIMER_FIRED,
                workflow=ctx.name,
                purpose="workflow",
                lag_s=max(0.0, now - due),
            )
