"""How events reach the step: caller sends, the thread-safe mailbox, timers coming due.

Admission happens here: events to a machine that is not running are dropped, engine event
names are refused, plugins may answer an event from ``on_before_send``. Whatever is admitted
runs through ``Core._run``, on the thread that owns the interpreter.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import ENGINE_EVENT_PREFIXES, EngineEvent, Event, Receipt, to_event
from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.state import NOT_STARTED, RUNNING
from xsm_celery.errors import InterpreterStoppedError, RunawayChainError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.effects import Timer
    from xsm_celery.engine.machine import Machine

__all__ = ["Delivery"]

logger = logging.getLogger("xsm_celery.engine")


class Delivery:
    """Admission and delivery of events (a mixin of ``Core``)."""

    machine: Machine
    clock: Clock
    _status: str
    _processing: bool
    _plugins: list[Any]
    _queue: deque[Event]
    _mailbox: deque[Event]
    _mailbox_lock: threading.Lock
    _timer_heap: list[tuple[float, int, Timer]]
    _leaves: tuple[StateNode, ...]
    _taken: int
    _denied: bool
    _run_error: BaseException | None

    if TYPE_CHECKING:

        @property
        def id(self) -> str: ...

        @property
        def current_state_ids(self) -> set[str]: ...

        def _run(self, event: Event) -> bool: ...

        def _pop_due_timer(self, now: float) -> Timer | None: ...

    def _send(self, event: Event, wait: bool) -> Receipt | None:
        """The body of ``send()`` shared by both drivers."""
        if self._processing:
            if self._admit(event):
                self._queue.append(event)
            return None
        if self._status != RUNNING or event.type.startswith(ENGINE_EVENT_PREFIXES):
            self._admit(event)
            return self._refusal(event) if wait else None
        if self._mailbox:
            self._drain_mailbox()
        if self._timer_heap:
            self._fire_due(self.clock.now())
        if self._plugins:
            answered = self._intercept(event)
            if answered is not None:
                return answered if wait else None
        if self._status != RUNNING:
            self._admit(event)
            return self._refusal(event) if wait else None
        taken = self._taken
        denied = self._run(event)
        return self._receipt_for(taken, denied) if wait else None

    def tick(self) -> None:
        """Deliver mailbox events and fire the timers that are due by the clock."""
        if self._processing or self._status != RUNNING:
            return
        self._drain_mailbox()
        if self._timer_heap:
            self._fire_due(self.clock.now())

    def _admit(self, event: Event) -> bool:
        """Whether a caller's event may run now; drops (with a log) those that may not."""
        if self._status != RUNNING:
            self._drop(event, "not_running")
            return False
        if event.type.startswith(ENGINE_EVENT_PREFIXES):
            logger.warning(
                "machine %r: event %r uses a name reserved for engine events "
                "(done.invoke.*, error.platform.*, done.state.*, after.*, xstate.*); ignored",
                self.id, event.type,
            )  # fmt: skip
            if self._plugins:
                dispatch(self, self._plugins, "on_event_dropped", (event, "engine_event"))
            return False
        return True

    def _drop(self, event: Event, reason: str) -> None:
        logger.warning(
            "machine %r is %s; event %r dropped", self.id, self._status, event.type
        )
        if self._plugins:
            dispatch(self, self._plugins, "on_event_dropped", (event, reason))

    def _refusal(self, event: Event) -> Receipt:
        """The receipt of an event that did not run."""
        error: BaseException | None = None
        if self._status != RUNNING:
            error = InterpreterStoppedError(
                f"interpreter {self.id!r} is {self._status}; event {event.type!r} was dropped"
            )
        return Receipt(frozenset(self.current_state_ids), False, error)

    def _receipt_for(self, taken_before: int, denied: bool) -> Receipt:
        return Receipt(
            frozenset(s.id for s in self._leaves),
            self._taken != taken_before,
            self._run_error,
            False,
            denied,
        )

    def _intercept(self, event: Event) -> Receipt | None:
        """Let plugins answer a caller's event before it runs (an inbox replay)."""
        answered: Any = dispatch(self, self._plugins, "on_before_send", (event,))
        return answered if isinstance(answered, Receipt) else None

    def _deliver(self, event: Event) -> None:
        """Run an event from the mailbox or a timer on the owning thread."""
        if isinstance(event, EngineEvent):
            if self._status == RUNNING:
                self._run(event)
            return
        if not self._admit(event):
            return
        if self._plugins and self._intercept(event) is not None:
            return
        self._run(event)

    def _drain_mailbox(self) -> bool:
        if not self._mailbox or self._processing:
            return False
        with self._mailbox_lock:
            batch = list(self._mailbox)
            self._mailbox.clear()
        for event in batch:
            self._deliver(event)
        return True

    def _fire_due(self, now: float, most: int | None = None) -> int:
        """Fire timers due by ``now``, each as its own step; at most ``most`` of them.

        Raises:
            RunawayChainError: zero-delay timers keep re-arming (more than the chain limit
                fired in one call).
        """
        limit = self.machine.chain_limit
        fired = 0
        while self._status == RUNNING and not self._processing:
            if most is not None and fired >= most:
                break
            timer = self._pop_due_timer(now)
            if timer is None:
                break
            fired += 1
            if fired > limit:
                raise RunawayChainError(
                    f"machine {self.id!r}: more than {limit} timers came due at once; a "
                    "zero-delay 'after' cycle never lets time pass",
                    limit=limit,
                )
            self._run(EngineEvent(timer.after.event_type, None, timer.node.id))
        return fired

    def _clock_next_due(self) -> float | None:
        if self._processing or self._status != RUNNING:
            return None
        heap = self._timer_heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _clock_fire(self, now_ms: float) -> None:
        self._fire_due(now_ms, most=1)

    def _clock_drain(self) -> bool:
        return self._drain_mailbox()

    def send_threadsafe(self, event_or_type: Any, /, **payload: Any) -> None:
        """Queue an event from any thread; it runs on the owner's next step.

        A sync interpreter delivers it at its next ``send()``, ``tick()`` or clock
        increment; the async one on its event loop. FIFO per sending thread.
        """
        event = to_event(event_or_type, payload)
        with self._mailbox_lock:
            if self._status in (NOT_STARTED, RUNNING):
                self._mailbox.append(event)
                self._wake()
                return
        self._drop(event, "not_running")

    def _wake(self) -> None:
        """Hook: the async interpreter schedules a mailbox drain on its loop."""
