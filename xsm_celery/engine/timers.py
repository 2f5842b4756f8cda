"""``after`` timers: armed when a state is entered, cancelled when it exits, fired when due.

Each interpreter keeps its own heap of timers; its clock asks it for the next due time and
tells it to fire (see :mod:`xsm_celery.engine.clock`). A named delay that raises or returns
something that is not a finite number of milliseconds is contained: its timer is not armed,
and the error is what :func:`arm_timers` returns so the step can record it.
"""

from __future__ import annotations

import heapq
import logging
import math
from typing import TYPE_CHECKING

from xsm_celery.errors import ConfigurationError, ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import AfterDef, StateNode
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.runtime import Core

__all__ = [
    "Timer",
    "arm_timers",
    "cancel_all_timers",
    "cancel_delayed",
    "cancel_timers",
    "next_due",
    "pending_timers",
    "pop_due_timer",
    "push_timer",
]

logger = logging.getLogger("xsm_celery.engine")


class Timer:
    """A pending ``after`` timer of one state entry; ``cancelled`` once the state exits.

    A delayed event (``raise`` or ``sendTo`` with a ``delay``) is a timer too: it has an
    ``event`` instead of an ``after``, an optional ``send_id`` for ``cancel``, and a
    ``target`` actor id (None: the machine itself). It belongs to the machine, not a state,
    so only ``cancel``, ``stop()`` or the machine finishing drops it.
    """

    __slots__ = ("after", "cancelled", "delay_ms", "due", "event", "node", "send_id", "target")

    def __init__(
        self,
        due: float,
        node: StateNode,
        after: AfterDef | None,
        delay_ms: float,
        *,
        event: Event | None = None,
        send_id: str | None = None,
        target: str | None = None,
    ) -> None:
        self.due = due
        self.node = node
        self.after = after
        self.delay_ms = delay_ms
        self.cancelled = False
        self.event = event
        self.send_id = send_id
        self.target = target


def push_timer(core: Core, timer: Timer) -> None:
    """Add an armed timer to the interpreter's heap and its state's list (or the delayed)."""
    heapq.heappush(core._timer_heap, (timer.due, next(core._timer_seq), timer))
    if timer.event is not None:
        core._delayed.append(timer)
    else:
        core._timers_by_state.setdefault(timer.node, []).append(timer)
    core._timers_armed()


def cancel_delayed(core: Core, send_id: str) -> int:
    """Cancel the pending delayed events sent with ``send_id``; how many there were."""
    found = [t for t in core._delayed if t.send_id == send_id]
    for timer in found:
        timer.cancelled = True
        core._delayed.remove(timer)
    return len(found)


def arm_timers(core: Core, node: StateNode, event: Event) -> BaseException | None:
    """Start the ``after`` timers of a state just entered; the first delay error, if any."""
    now = core.clock.now()
    error: BaseException | None = None
    armed = core._timers_by_state.get(node)
    for after in node.after:
        delay = after.delay_ms
        if delay is None:
            try:
                delay = _named_delay(core, after, event)
            except Exception as exc:
                logger.error(
                    "machine %r: delay %r failed; its timer is not armed",
                    core.machine.id,
                    after.key,
                    exc_info=exc,
                )
                error = error or exc
                continue
        # push_timer inlined: a state's timers are armed on every entry (the retry loop's
        # hot path), and they are never delayed events, so its branch is known here.
        timer = Timer(now + delay, node, after, delay)
        heapq.heappush(core._timer_heap, (timer.due, next(core._timer_seq), timer))
        if armed is None:
            armed = core._timers_by_state[node] = []
        armed.append(timer)
    core._timers_armed()
    return error


def _named_delay(core: Core, after: AfterDef, event: Event) -> float:
    impl = after.delay_fn
    if impl is None:
        raise ImplementationMissingError("delay", after.key, path=after.path)
    value = impl(core._context, event) if callable(impl) else impl
    delay = float(value)
    if not math.isfinite(delay) or delay < 0:
        raise ConfigurationError(f"delay {after.key!r} gave {value!r}; need finite ms >= 0")
    return delay


def cancel_timers(core: Core, node: StateNode) -> None:
    """Cancel the timers of a state that exits; compacts the heap when it is mostly dead."""
    for timer in core._timers_by_state.pop(node, ()):
        timer.cancelled = True
    heap = core._timer_heap
    while heap and heap[0][2].cancelled:
        heapq.heappop(heap)
    if len(heap) > 64:
        live = sum(len(timers) for timers in core._timers_by_state.values())
        if len(heap) > 2 * live:
            heap[:] = [entry for entry in heap if not entry[2].cancelled]
            heapq.heapify(heap)


def cancel_all_timers(core: Core) -> None:
    """Cancel every timer and delayed event (stop, or the machine is done)."""
    for timers in core._timers_by_state.values():
        for timer in timers:
            timer.cancelled = True
    for timer in core._delayed:
        timer.cancelled = True
    core._timers_by_state.clear()
    core._delayed.clear()
    core._timer_heap.clear()


def pop_due_timer(core: Core, now: float) -> Timer | None:
    """Take the earliest live timer due by ``now`` off the heap, or None."""
    heap = core._timer_heap
    while heap and heap[0][0] <= now:
        timer = heapq.heappop(heap)[2]
        if timer.cancelled:
            continue
        if timer.event is not None:
            core._delayed.remove(timer)
            return timer
        timers = core._timers_by_state.get(timer.node)
        if timers is not None:
            timers.remove(timer)
            if not timers:
                del core._timers_by_state[timer.node]
        return timer
    return None


def next_due(core: Core) -> float | None:
    """When the earliest live timer is due, in clock milliseconds."""
    heap = core._timer_heap
    while heap and heap[0][2].cancelled:
        heapq.heappop(heap)
    return heap[0][0] if heap else None


def pending_timers(core: Core) -> list[Timer]:
    """The armed timers, earliest first."""
    live = [t for ts in core._timers_by_state.values() for t in ts if not t.cancelled]
    return sorted(live, key=lambda t: t.due)
