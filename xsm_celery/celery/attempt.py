"""One Celery run of a chart task: restore the chart, take one attempting step, read the outcome.

The chart decides; this module only carries the decision out. A run restores the snapshot the
message carried (or starts a fresh chart), fires the pending retry timer so the chart enters
``attempting`` and invokes the ``work`` service (the user's function), and then reads where
the chart settled:

* a final state that is not tagged ``dead-letter``: success, the function's return value;
* a dead-letter state: give up now, with the last error;
* a state with a pending ``after`` timer: retry after exactly that timer's delay, unless the
  timer's transition would land in a dead-letter state, in which case the timer is fired at
  once so that giving up happens in the same run as the last failure.

Time is a ``SimulatedClock`` that only this module moves, so the delay is whatever the chart's
named delay computed, carried to Celery in milliseconds without rounding.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.engine import SimulatedClock, SyncInterpreter
from xsm_celery.engine.events import EngineEvent
from xsm_celery.errors import ConfigurationError, SnapshotError

__all__ = ["DEAD_LETTER_TAG", "Outcome", "Run", "current_run", "run_chart"]

logger = logging.getLogger(__name__)

#: The tag that marks a state where the task gives up.
DEAD_LETTER_TAG = "dead-letter"


@dataclass
class Run:
    """What one Celery run passes to the ``work`` service and learns back from it."""

    #: Calls the user's function with the message's arguments.
    call: Callable[[], Any]
    #: Records "attempt n started" before the function runs (None: eager or direct runs).
    mark: Callable[[int], None] | None = None
    #: The error the first invocation reports instead of running (a lost attempt).
    lost: BaseException | None = None
    result: Any = None
    error: BaseException | None = None
    #: A Celery control-flow exception (Ignore, Reject, Retry) to re-raise untouched.
    control: BaseException | None = None
    #: The delay the chart's last named delay computed, in ms.
    delay_ms: float | None = None
    invocations: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


_current: contextvars.ContextVar[Run] = contextvars.ContextVar("xsm_celery_run")


def current_run() -> Run:
    """The run in progress on this thread (the ``work`` service reads it)."""
    return _current.get()


@dataclass(frozen=True)
class Outcome:
    """Where the chart settled: ``done``, ``retry``, ``give_up`` or ``control``."""

    kind: str
    run: Run
    interpreter: Any
    delay_ms: float | None = None
    state_id: str | None = None


def run_chart(machine: Any, snapshot: str | None, run: Run) -> Outcome:
    """Take one attempting step of ``machine`` for ``run`` and classify the result."""
    clock = SimulatedClock(start_ms=0.0)
    token = _current.set(run)
    try:
        if snapshot is None:
            interp = SyncInterpreter(machine, clock=clock).start()
        else:
            interp = _restore(machine, snapshot, clock)
            if run.invocations == 0:
                _fire_next(clock)
        return _classify(machine, interp, clock, run)
    finally:
        _current.reset(token)


def _restore(machine: Any, snapshot: str, clock: SimulatedClock) -> Any:
    """The interpreter the message's snapshot describes, or the chart restarted with its context.

    A deploy may change the chart while retries are in flight. Their snapshots no longer fit,
    so the chart starts again from its initial state with the old context (attempt counter,
    error chain): the task keeps its history and its budget instead of failing on restore.
    """
    try:
        return SyncInterpreter.from_snapshot(snapshot, machine, clock=clock)
    except SnapshotError as exc:
        logger.warning(
            "chart %r cannot restore the snapshot in the message (%s); starting the chart "
            "again with the same context",
            machine.id,
            exc,
        )
    restart = {
        "machine_id": machine.id,
        "machine_hash": machine.structure_hash,
        "status": "not_started",
        "context": _context_of(snapshot),
        "state_ids": [],
    }
    return SyncInterpreter.from_snapshot(restart, machine, clock=clock).start()


def _context_of(snapshot: str) -> dict[str, Any]:
    try:
        context = json.loads(snapshot).get("context")
    except (ValueError, TypeError, AttributeError):
        return {}
    return dict(context) if isinstance(context, dict) else {}


def _fire_next(clock: SimulatedClock) -> None:
    due = clock.next_due()
    if due is not None:
        clock.advance_to(due)


def _classify(machine: Any, interp: Any, clock: SimulatedClock, run: Run) -> Outcome:
    if run.control is not None:
        return Outcome("control", run, interp)
    dead = _dead_letter_state(interp)
    if dead is not None:
        return Outcome("give_up", run, interp, state_id=dead)
    if interp.status == "done":
        return Outcome("done", run, interp)
    if clock.next_due() is None or run.delay_ms is None:
        raise ConfigurationError(
            f"retry chart {machine.id!r} settled in {sorted(interp.current_state_ids)} with no "
            "final state and no pending 'after' timer; every path of a task chart must end in "
            "a final state, a 'dead-letter' state, or wait on a named delay"
        )
    if _timer_gives_up(machine, interp):
        _fire_next(clock)
        return _classify(machine, interp, clock, run)
    return Outcome("retry", run, interp, delay_ms=run.delay_ms)


def _dead_letter_state(interp: Any) -> str | None:
    if not interp.has_tag(DEAD_LETTER_TAG):
        return None
    for state_id in sorted(interp.current_state_ids):
        node = interp.machine.get_state(state_id)
        if DEAD_LETTER_TAG in node.tags:
            return str(node.id)
    return str(sorted(interp.current_state_ids)[0])


def _timer_gives_up(machine: Any, interp: Any) -> bool:
    """Whether the pending timer's transition would enter a dead-letter state.

    The guards of an ``after`` transition read the context, which nothing changes while the
    timer waits, so evaluating them now gives the answer the timer will give later.
    """
    ctx = interp.context
    for state_id in interp.current_state_ids:
        node = machine.get_state(state_id)
        for owner in (node, *node.ancestors):
            for after in owner.after:
                target = _first_enabled(after, ctx)
                if target is not None:
                    return any(DEAD_LETTER_TAG in entered.tags for entered in target.entry)
    return False


def _first_enabled(after: Any, ctx: Any) -> Any:
    event = EngineEvent(after.event_type)
    for transition in after.transitions:
        guard = transition.guard
        if guard is None or _passes(guard, ctx, event):
            return transition
    return None


def _passes(guard: Any, ctx: Any, event: Any) -> bool:
    if guard.fn is None:
        return False
    try:
        if guard.takes_params:
            return bool(guard.fn(ctx, event, guard.params))
        return bool(guard.fn(ctx, event))
    except Exception:
        return False
