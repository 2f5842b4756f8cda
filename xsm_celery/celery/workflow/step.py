"""One workflow step: lock the instance, answer a redelivery, apply one message, commit.

A step holds the instance's lock inside its store's transaction (``workflow_session``: the
instance row's lock on SQLAlchemy's PostgreSQL, SQLite's write lock, an advisory lock in a
Django ``atomic`` block) for load, act and save, so two messages for one key never
interleave. Inside that transaction it writes, or rolls back together: the snapshot, the
inbox receipt of the message's id, the rows of timers the step armed, the back-stop rows of
the Celery tasks it dispatches, the chart's outbox rows, the transition log and (Django) the
instance summary. Only after the commit are tasks dispatched, countdown timers published and
left invocations revoked; each published message then deletes its back-stop row, and a row
whose publish never happened (the worker died in between) is published by the Beat scan.

A message for an invocation that is no longer active, or for an unknown instance, is stale:
nothing is saved, it is logged and counted (``STALE_COMPLETION``).
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from xsm_celery.celery.workflow.session import StepSession, generic_session
from xsm_celery.engine import EngineEvent, Event, PluginBase, Receipt
from xsm_celery.errors import WorkflowStepError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.persistence.idempotency import receipt_to_json
from xsm_celery.persistence.locks import OptimisticLock
from xsm_celery.persistence.persisted import persisted
from xsm_celery.persistence.timers import deadlines_of

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.api import Workflow

__all__ = [
    "INVOCATIONS_KEY",
    "Dispatch",
    "Message",
    "StepEffects",
    "StepOutcome",
    "TimerSend",
    "current_step",
    "run_step",
]

logger = logging.getLogger("xsm_celery.workflow")

#: Private context key of the Celery tasks an instance's active invocations wait for.
INVOCATIONS_KEY = "_xsm_invocations"

#: Seconds after which a message that was committed but never published is sent by Beat.
BACKSTOP_GRACE_S = 30.0

_KINDS = ("event", "start", "timer", "done", "error")

_current: contextvars.ContextVar[StepEffects | None] = contextvars.ContextVar(
    "xsm_workflow_step", default=None
)


@dataclass(frozen=True)
class Message:
    """What one step task carries: an id for the inbox, a kind, and the event or completion."""

    id: str
    kind: str
    type: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    invoke: str = ""
    dispatch: str = ""
    data: Any = None
    due_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the task message carries."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        for name in ("type", "invoke", "dispatch"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.payload:
            out["payload"] = dict(self.payload)
        if self.data is not None:
            out["data"] = self.data
        if self.due_at is not None:
            out["due_at"] = self.due_at
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> Message:
        """Validate a message off the wire.

        Raises:
            WorkflowStepError: not a mapping, an unknown kind, a missing id or type.
        """
        if not isinstance(raw, dict):
            raise WorkflowStepError(f"a workflow message is a JSON object, got {raw!r:.80}")
        ident, kind = raw.get("id"), raw.get("kind")
        if not isinstance(ident, str) or not ident or kind not in _KINDS:
            raise WorkflowStepError(
                f"workflow message needs a non-empty 'id' and a 'kind' in {_KINDS}: {raw!r:.200}"
            )
        payload = raw.get("payload") or {}
        if not isinstance(payload, dict):
            raise WorkflowStepError(f"workflow message payload must be an object: {payload!r:.80}")
        if kind == "event" and not (isinstance(raw.get("type"), str) and raw["type"]):
            raise WorkflowStepError(f"workflow event message has no 'type': {raw!r:.200}")
        due = raw.get("due_at")
        return cls(
            id=ident,
            kind=str(kind),
            type=str(raw.get("type") or ""),
            payload=dict(payload),
            invoke=str(raw.get("invoke") or ""),
            dispatch=str(raw.get("dispatch") or ""),
            data=raw.get("data"),
            due_at=float(due) if isinstance(due, int | float) else None,
        )


@dataclass
class Dispatch:
    """A Celery task a step asked for; sent only after the step commits."""

    invoke_id: str
    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    task_id: str
    options: dict[str, Any]
    key: str = ""
    backstop: str | None = None


@dataclass
class TimerSend:
    """A timer the step armed: its message, its delay, and its row (durable or back-stop)."""

    task_id: str
    payload: dict[str, Any]
    delay_s: float
    due_at: float
    durable: bool
    row: str | None = None


@dataclass
class StepEffects:
    """What one step writes beside its snapshot, and does once it committed."""

    workflow: Workflow
    key: str
    dispatches: list[Dispatch] = field(default_factory=list)
    revokes: list[str] = field(default_factory=list)
    timers: list[TimerSend] = field(default_factory=list)
    dead_letters: list[Any] = field(default_factory=list)

    def write_rows(self, timers: Any, now: float) -> None:
        """Inside the transaction: a durable row per long timer, a back-stop row per message."""
        for dispatch in self.dispatches:
            payload = self.workflow.dispatch_payload(dispatch)
            dispatch.backstop = timers.schedule(dispatch.task_id, now + BACKSTOP_GRACE_S, payload)
        for timer in self.timers:
            due = timer.due_at if timer.durable else timer.due_at + BACKSTOP_GRACE_S
            timer.row = timers.schedule(timer.task_id, due, timer.payload)


def current_step() -> StepEffects | None:
    """The step running on this thread, if any (``celery_service`` records its tasks here)."""
    return _current.get()


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

    def save(self, key: str, snapshot: str, *, expected_version: int | None = None,
             machine_version: str = "") -> int:  # fmt: skip
        return self._session.save(key, snapshot, expected_version=expected_version,
                                  machine_version=machine_version)  # fmt: skip

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

    def on_interpreter_start(self, i: Any) -> None:
        """A new instance: merge ``start(key, context=...)`` before the entry actions run."""
        i.context.update(self.initial)

    def on_transition(self, i: Any, from_states: Any, to_states: Any, transition: Any) -> None:
        self.transitions.append(
            {
                "event": getattr(transition, "event", None) or "",
                "source": sorted(s.id for s in from_states if s.type in ("atomic", "final")),
                "target": sorted(s.id for s in to_states if s.type in ("atomic", "final")),
                "at": time.time(),
            }
        )

    def on_event_received(self, i: Any, event: Event) -> None:
        if event.type.startswith("after."):
            self.fired.append(event.type)

    def on_action_error(self, i: Any, action: Any, error: BaseException) -> None:
        self.errors.append(error)

    def on_guard_error(self, i: Any, guard_name: str, event: Event, error: BaseException) -> None:
        self.errors.append(error)


def run_step(workflow: Workflow, key: str, message: Message) -> StepOutcome:
    """Apply ``message`` to instance ``key`` of ``workflow`` in one transaction.

    Raises:
        WorkflowStepError: an action or guard raised (nothing was saved); its cause is the
            error. Store errors (``LockTimeoutError``, ``StoreUnavailableError``) propagate.
    """
    effects = StepEffects(workflow, key)
    token = _current.set(effects)
    started = time.perf_counter()
    try:
        outcome, recorder, before = _locked_step(workflow, key, message, effects)
    finally:
        _current.reset(token)
    if outcome.outcome in ("applied", "started"):
        _publish_effects(workflow, effects)
        _report(workflow, message, recorder, before=before, outcome=outcome)
    emit(
        FactKind.WORKFLOW_STEP,
        workflow=workflow.name,
        message_kind=message.kind,
        outcome=outcome.outcome,
        duration_s=time.perf_counter() - started,
    )
    return outcome


def _locked_step(
    workflow: Workflow, key: str, message: Message, effects: StepEffects
) -> tuple[StepOutcome, _Recorder, list[dict[str, Any]]]:
    stores = workflow.stores()
    store_key = workflow.store_key(key)
    recorder = _Recorder(dict(message.payload) if message.kind == "start" else None)
    open_session = stores.session or partial(generic_session, stores)
    with open_session(store_key, message.id, timeout=workflow.lock_timeout_s,
                      ttl_s=workflow.inbox_ttl_s) as session:  # fmt: skip
        if session.duplicate:
            logger.info("workflow %s[%s]: message %s already applied", workflow.name, key,
                        message.id)  # fmt: skip
            return StepOutcome(key, message.id, "duplicate"), recorder, []
        record = session.record
        if record is None and message.kind in ("timer", "done", "error"):
            _stale(workflow, key, message, "unknown instance")
            return StepOutcome(key, message.id, "stale"), recorder, []
        before = deadlines_of(record.snapshot) if record is not None else []
        receipt: list[Receipt] = []
        try:
            if message.kind == "timer" and _timer_id_of(message) not in _ids(before):
                raise _Stale("its timer is no longer pending")
            with _instance(workflow, store_key, message, recorder=recorder, receipt=receipt,
                           effects=effects, session=session) as interp:  # fmt: skip
                _apply(workflow, key, message, interp, recorder=recorder, receipt=receipt)
                _reconcile(workflow, interp, effects)
                _arm_timers(workflow, key, interp, before=before, effects=effects,
                            message=message)  # fmt: skip
        except _Stale as why:
            _stale(workflow, key, message, str(why))
            return StepOutcome(key, message.id, "stale"), recorder, before
        result = receipt[0] if receipt else Receipt(frozenset(interp.current_state_ids), False)
        kind = "started" if record is None else "applied"
        version = (record.version if record is not None else 0) + 1
        outcome = StepOutcome(key, message.id, kind, result.state_ids, result.changed, version)
    return outcome, recorder, before


@contextmanager
def _instance(
    workflow: Workflow, store_key: str, message: Message, *, recorder: _Recorder,
    receipt: list[Receipt], effects: StepEffects, session: StepSession,
) -> Iterator[Any]:  # fmt: skip
    """``persisted()`` in the session already open, writing the step's rows before commit."""
    stores = workflow.stores()

    def write_rows(interp: Any) -> None:
        effects.write_rows(stores.timers, time.time())
        result = receipt[0] if receipt else Receipt(frozenset(interp.current_state_ids), False)
        summary = workflow.summary(store_key, interp) if stores.journal is not None else {}
        session.finish(receipt_to_json(result), summary, [
            {"workflow": workflow.name, "key": workflow.user_key(store_key),
             "message": message.kind, **t} for t in recorder.transitions
        ])  # fmt: skip

    with persisted(
        _Session(stores.snapshots, session),
        store_key,
        workflow.machine,
        lock=OptimisticLock(0),
        plugins=[recorder, *workflow.step_plugins()],
        before_commit=[write_rows],
    ) as interp:
        yield interp


def _apply(
    workflow: Workflow, key: str, message: Message, interp: Any, *, recorder: _Recorder,
    receipt: list[Receipt],
) -> None:  # fmt: skip
    """Deliver the message to the loaded instance; an action error aborts the step."""
    if message.kind == "event":
        if interp.status != "running":
            logger.warning("workflow %s[%s] is %s; event %r ignored", workflow.name, key,
                           interp.status, message.type)  # fmt: skip
        else:
            receipt.append(interp.send(Event(message.type, dict(message.payload)), wait=True))
    elif message.kind in ("done", "error"):
        _complete(interp, message)
    if recorder.errors:
        error = recorder.errors[0]
        raise WorkflowStepError(
            f"workflow {workflow.name}[{key}]: {type(error).__name__} in a step on "
            f"{message.kind} {message.type or message.invoke!r}: {error}; nothing was saved"
        ) from error


def _complete(interp: Any, message: Message) -> None:
    """Turn a Celery task's result into ``done.invoke.<id>`` / ``error.platform.<id>``."""
    waiting = interp.context.get(INVOCATIONS_KEY) or {}
    if interp.status != "running" or waiting.get(message.invoke) != message.dispatch:
        raise _Stale(f"invocation {message.invoke!r} task {message.dispatch} is not active")
    del waiting[message.invoke]
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
        event = EngineEvent(f"error.platform.{message.invoke}", error, message.invoke)
    interp.send_threadsafe(event)
    interp.tick()


def _active_invocations(workflow: Workflow, interp: Any) -> set[str]:
    """Ids of the invocations whose state is active now."""
    active: set[str] = set()
    leaves = interp.current_state_ids
    for invoke_id, state_id in workflow.invocation_states().items():
        if any(leaf == state_id or leaf.startswith(state_id + ".") for leaf in leaves):
            active.add(invoke_id)
    return active


def _reconcile(workflow: Workflow, interp: Any, effects: StepEffects) -> None:
    """Revoke tasks of invocations whose state was left; drop dispatches already stale."""
    waiting = interp.context.get(INVOCATIONS_KEY)
    active = _active_invocations(workflow, interp) if interp.status == "running" else set()
    if isinstance(waiting, dict):
        for invoke_id in [i for i in waiting if i not in active]:
            effects.revokes.append(str(waiting.pop(invoke_id)))
        if not waiting:
            interp.context.pop(INVOCATIONS_KEY, None)
    current = interp.context.get(INVOCATIONS_KEY) or {}
    kept = [d for d in effects.dispatches if current.get(d.invoke_id) == d.task_id]
    dropped = {d.task_id for d in effects.dispatches} - {d.task_id for d in kept}
    effects.revokes[:] = [t for t in effects.revokes if t not in dropped]
    effects.dispatches[:] = kept


def _arm_timers(
    workflow: Workflow, key: str, interp: Any, *, before: list[dict[str, Any]],
    effects: StepEffects, message: Message,
) -> None:  # fmt: skip
    """Schedule the timers this step armed: countdown messages, or durable rows when long.

    A timer message that arrived before its due time (clock skew) re-arms its own timer.
    """
    if not interp.pending_timers():
        return  # the usual step: no timer to arm, so no snapshot to build just to find none
    known = _ids(before)
    if message.kind == "timer":
        known.discard(_timer_id_of(message))
    now = time.time()
    for deadline in deadlines_of(interp.snapshot()):
        if _timer_id(deadline) in known:
            continue
        due = float(deadline["due_at_wall"])
        delay = max(0.0, due - now)
        task_id, payload = workflow.timer_payload(key, deadline)
        durable = delay > workflow.countdown_max_s
        effects.timers.append(TimerSend(task_id, payload, delay, due, durable))
        emit(FactKind.TIMER_SCHEDULED, workflow=workflow.name, durable=durable)


def _timer_id(deadline: dict[str, Any]) -> tuple[str, str, float]:
    return (
        str(deadline.get("state_id")),
        str(deadline.get("event_type")),
        round(float(deadline.get("due_at_wall") or 0.0), 3),
    )


def _timer_id_of(message: Message) -> tuple[str, str, float]:
    return (
        str(message.payload.get("state_id")),
        message.type,
        round(float(message.due_at or 0.0), 3),
    )


def _ids(deadlines: list[dict[str, Any]]) -> set[tuple[str, str, float]]:
    return {_timer_id(d) for d in deadlines}


def _publish_effects(workflow: Workflow, effects: StepEffects) -> None:
    """After the commit: dispatch tasks, publish countdowns, revoke; clear back-stop rows."""
    stores = workflow.stores()
    for dispatch in effects.dispatches:
        try:
            workflow.send_dispatch(dispatch)
        except Exception:
            logger.exception("workflow %s[%s]: dispatching %s failed; Beat sends it in %.0f s",
                             workflow.name, effects.key, dispatch.task_name,
                             BACKSTOP_GRACE_S)  # fmt: skip
            continue
        _forget_row(stores, dispatch.backstop)
    eager = bool(effects.timers) and bool(workflow.app.conf.task_always_eager)
    for timer in effects.timers:
        if timer.durable or eager:
            continue
        try:
            workflow.send_payload(timer.task_id, timer.payload, countdown=timer.delay_s)
        except Exception:
            logger.exception("workflow %s[%s]: publishing a timer failed; Beat sends it",
                             workflow.name, effects.key)  # fmt: skip
            continue
        _forget_row(stores, timer.row)
    for task_id in effects.revokes:
        workflow.revoke(task_id)
    for record in effects.dead_letters:
        workflow.write_dead_letter(effects.key, record)


def _forget_row(stores: Any, row: str | None) -> None:
    if row is None:
        return
    try:
        stores.timers.delete(row)
    except Exception:
        logger.warning("could not delete back-stop timer row %s; it fires as a no-op", row)


def _stale(workflow: Workflow, key: str, message: Message, why: str) -> None:
    logger.info("workflow %s[%s]: stale %s message %s ignored (%s)", workflow.name, key,
                message.kind, message.id, why)  # fmt: skip
    emit(FactKind.STALE_COMPLETION, workflow=workflow.name, message_kind=message.kind)


def _report(
    workflow: Workflow, message: Message, recorder: _Recorder, *, before: list[dict[str, Any]],
    outcome: StepOutcome,
) -> None:  # fmt: skip
    for transition in recorder.transitions:
        emit(FactKind.WORKFLOW_TRANSITION, workflow=workflow.name,
             event=str(transition["event"]).split(".", 1)[0])  # fmt: skip
    if recorder.fired:
        now = time.time()
        dues = {str(d.get("event_type")): float(d["due_at_wall"]) for d in before}
        for event_type in recorder.fired:
            due = dues.get(event_type, message.due_at or now)
            emit(FactKind.TIMER_FIRED, workflow=workflow.name, lag_s=max(0.0, now - due))
