"""How events reach the step: the caller's send, the thread-safe mailbox, timers coming due.

Admission happens here: events to a machine that is not running are dropped, engine event
names are refused, plugins may answer an event from ``on_before_send``. Whatever is admitted
runs through ``Core._run`` on the thread that owns the interpreter.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import ENGINE_EVENT_PREFIXES, EngineEvent, Event, Receipt, to_event
from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.state import NOT_STARTED, RUNNING
from xsm_celery.engine.timers import pop_due_timer
from xsm_celery.errors import InterpreterStoppedError, RunawayChainError

if TYPE_CHECKING:
    from xsm_celery.engine.runtime import Core
    from xsm_celery.engine.timers import Timer

__all__ = [
    "admit",
    "deliver",
    "deliver_delayed",
    "drain_mailbox",
    "drop",
    "fire_due",
    "intercept",
    "post_threadsafe",
    "refusal",
    "run_open",
]

logger = logging.getLogger("xsm_celery.engine")


def admit(core: Core, event: Event) -> bool:
    """Whether a caller's event may run now; drops (with a log) those that may not."""
    if core._status != RUNNING:
        drop(core, event, "not_running")
        return False
    if event.type.startswith(ENGINE_EVENT_PREFIXES):
        logger.warning(
            "machine %r: event %r uses a name reserved for engine events "
            "(done.invoke.*, error.platform.*, done.state.*, after.*, xstate.*); ignored",
            core.id,
            event.type,
        )
        if core._plugins:
            dispatch(core, core._plugins, "on_event_dropped", (event, "engine_event"))
        return False
    return True


def drop(core: Core, event: Event, reason: str) -> None:
    """Log a dropped event and tell the plugins why."""
    logger.warning("machine %r is %s; event %r dropped", core.id, core._status, event.type)
    if core._plugins:
        dispatch(core, core._plugins, "on_event_dropped", (event, reason))


def refusal(core: Core, event: Event) -> Receipt:
    """The receipt of an event that did not run."""
    error: BaseException | None = None
    if core._status != RUNNING:
        error = InterpreterStoppedError(
            f"interpreter {core.id!r} is {core._status}; event {event.type!r} was dropped"
        )
    return Receipt(frozenset(core.current_state_ids), False, error)


def intercept(core: Core, event: Event) -> Receipt | None:
    """Let plugins answer a caller's event before it runs (an inbox replay)."""
    answered: Any = dispatch(core, core._plugins, "on_before_send", (event,))
    return answered if isinstance(answered, Receipt) else None


def deliver(core: Core, event: Event) -> None:
    """Run an event from the mailbox on the owning thread, admitted like a caller's."""
    if isinstance(event, EngineEvent):
        if core._status == RUNNING:
            core._run(event)
        return
    if not admit(core, event):
        return
    if core._plugins and intercept(core, event) is not None:
        return
    core._run(event)


def run_open(core: Core) -> bool:
    """Whether a run is open: the async driver leaves a long one open between slices.

    A function, not a read of ``_processing`` in place, because the callers check it again
    after a call that may have opened one.
    """
    return core._processing


def drain_mailbox(core: Core) -> bool:
    """Deliver the events other threads posted; whether there were any."""
    if not core._mailbox or core._processing:
        return False
    with core._mailbox_lock:
        batch = list(core._mailbox)
        core._mailbox.clear()
    for index, event in enumerate(batch):
        if run_open(core):
            # The async driver is continuing a long run: the rest waits for its catch-up.
            with core._mailbox_lock:
                core._mailbox.extendleft(reversed(batch[index:]))
            break
        deliver(core, event)
    return True


def fire_due(core: Core, now: float, most: int | None = None) -> int:
    """Fire timers due by ``now``, each as its own step; at most ``most`` of them.

    Raises:
        RunawayChainError: zero-delay timers keep re-arming (more than
            ``machine.max_iterations`` fired in one call).
    """
    limit = core.machine.max_iterations
    fired = 0
    while core._status == RUNNING and not core._processing:
        if most is not None and fired >= most:
            break
        timer = pop_due_timer(core, now)
        if timer is None:
            break
        fired += 1
        if fired > limit:
            raise RunawayChainError(
                f"machine {core.id!r}: more than {limit} timers came due at once; a "
                "zero-delay 'after' cycle never lets time pass; give it a delay, or raise "
                "the machine's max_iterations",
                limit=limit,
            )
        if timer.after is not None:
            core._run(EngineEvent(timer.after.event_type, None, timer.node.id))
        else:
            deliver_delayed(core, timer)
    return fired


def deliver_delayed(core: Core, timer: Timer) -> None:
    """A delayed ``raise`` runs as the machine's own event; a delayed ``sendTo`` goes out."""
    event = timer.event
    assert event is not None
    if timer.target is None:
        core._run(event)
    else:
        core.send_to(timer.target, event)


def post_threadsafe(core: Core, event_or_type: Any, payload: dict[str, Any]) -> None:
    """Queue an event from any thread for the owner's next step (``send_threadsafe``)."""
    event = to_event(event_or_type, payload)
    with core._mailbox_lock:
        if core._status in (NOT_STARTED, RUNNING):
            core._mailbox.append(event)
            core._wake()
            return
    drop(core, event, "not_running")
