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

from xsm_celery.errors import ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import AfterDef, StateNode
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.runtime import Core

__all__ = [
    "Timer",
    "arm_timers",
    "cancel_all_timers",
    "cancel_timers",
    "next_due",
    "pending_timers",
    "pop_due_timer",
    "push_timer",
]

logger = logging.getLogger("xsm_celery.engine")


class Timer:
    """A pending ``after`` timer of one state entry; ``cancelled`` once the state exits."""

    __slots__ = ("after", "cancelled", "delay_ms", "due", "node")

    def __init__(self, due: float, node: StateNode, after: AfterDef, delay_ms: float) -> None:
        self.due = due
        self.node = node
        self.after = after
        self.delay_ms = delay_ms
        self.cancelled = False


def push_timer(core: Core, timer: Timer) -> None:
    """Add an armed timer to the interpreter's heap and its state's list."""
    heapq.heappush(core._timer_heap, (timer.due, next(core._timer_seq), timer))
    core._timers_by_state.setdefault(timer.node, []).append(timer)


def arm_timers(core: Core, node: StateNode, event: Event) -> BaseException | None:
    """Start the ``after`` timers of a state just entered; the first delay error, if any."""
    now = core.clock.now()
    error: BaseException | None = None
    for after in node.after:
        delay = after.delay_ms
        if delay is None:
            try:
                delay = _named_delay(core, after, event)
            except Exception as exc:
                logger.error(
                    "machine %r: delay %r failed; its timer is not armed", core.machine.id,
                    after.key, exc_info=exc,
                )  # fmt: skip
                error = error or exc
                continue
        push_timer(core, Timer(now + delay, node, after, delay))
    core._timers_armed()
    return error


def _named_delay(core: Core, after: AfterDef, event: Event) -> float:
    impl = after.delay_fn
    if impl is None:
        raise ImplementationMissingError("delay", after.key, path=after.path)
    value = impl(core._context, event) if callable(impl) else impl
    delay = float(value)
    if not math.isfinite(delay) or delay < 0:
        raise ValueError(f"delay {after.key!r} gave {value!r}; need finite ms >= 0")
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
    """Cancel every timer (stop, or the machine is done)."""
    for timers in core._timers_by_state.values():
        for timer in timers:
            timer.cancelled = True
    core._timers_by_state.clear()
    core._timer_heap.clear()


def pop_due_timer(core: Core, now: float) -> Timer | None:
    """Take the earliest live timer due by ``now`` off the heap, or None."""
    heap = core._timer_heap
    while heap and heap[0][0] <= now:
        timer = heapq.heappop(heap)[2]
        if timer.cancelled:
            continue
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
