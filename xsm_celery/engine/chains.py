"""How the async interpreter works through a long run without holding its event loop.

A run (one event, its eventless chain, the events it raises, the events its actions send) is
synchronous code, bounded by ``machine.max_iterations`` microsteps per event. On the async
interpreter a long run would still hold the loop for all of it, so the run loop ends a slice
every :data:`YIELD_EVERY` microsteps (``Core._advance``) and a driver task continues the run
after one turn of the loop. Meanwhile the run stays open (``_processing``):

* events the machine's own actions send join the run, as on the sync interpreter;
* events other coroutines send wait in a backlog and run after it, each as a run of its own,
  in the order they were sent, each awaiting its own receipt;
* timers that came due and events other threads posted run once the run is over.

An error that ends a continued run (``RunawayChainError``) is raised to whoever awaits the
``send()`` that started it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xsm_celery.engine import delivery
from xsm_celery.engine.state import RUNNING

if TYPE_CHECKING:
    from xsm_celery.engine.events import Event, Receipt
    from xsm_celery.engine.runtime import Core, StepResult

__all__ = ["YIELD_EVERY", "OpenRun", "Submitted"]

logger = logging.getLogger("xsm_celery.engine")

#: Microsteps the async interpreter runs before it lets other coroutines have the loop.
#: Small enough that a chain at the default bound (1000) yields ten times; large enough that
#: an ordinary event (a handful of microsteps) never pays for a loop turn.
YIELD_EVERY = 100

#: What a send decided: the receipt if the event ran at once, else the future that will hold
#: the outcome, and whether the caller wants the receipt from it.
Submitted = tuple[Any, "asyncio.Future[Any] | None", bool]


class OpenRun:
    """One async interpreter's run left open between slices, and the events waiting for it.

    Args:
        core: The interpreter.
        bind_loop: Its loop, found (and remembered) on first use; None outside a loop.
    """

    __slots__ = ("backlog", "bind_loop", "core", "done", "driver")

    def __init__(
        self, core: Core, bind_loop: Callable[[], asyncio.AbstractEventLoop | None]
    ) -> None:
        self.core = core
        self.bind_loop = bind_loop
        #: The outcome of the run left open between slices (None: no run is open).
        self.done: asyncio.Future[Any] | None = None
        #: Callers' events held back while a run is open: (event, outcome, wait).
        self.backlog: deque[tuple[Event, asyncio.Future[Any], bool]] = deque()
        #: The task continuing the open run and then the backlog.
        self.driver: asyncio.Task[None] | None = None

    def submit(self, event: Event, wait: bool) -> Submitted:
        """Run a caller's event now, or behind the run the driver is continuing."""
        if self.done is not None:
            return None, self.defer(event, wait), True
        backlog = len(self.backlog)
        receipt = self.core._send(event, wait)
        if len(self.backlog) > backlog:
            return None, self.backlog[-1][1], True
        opened = self._open()
        if opened is not None:
            return None, opened, wait
        return receipt, None, wait

    def _open(self) -> asyncio.Future[Any] | None:
        """The open run's future, read afresh after a call that may have opened it."""
        return self.done

    def suspend(self, result: StepResult) -> None:
        """A slice ended with work left: continue the run on the loop (or here, without one)."""
        core = self.core
        loop = self.bind_loop()
        if loop is None:
            while not core._advance(result):
                pass
            core._close_run(result)
            return
        self.done = loop.create_future()
        self._ensure_driver(loop)

    def defer(self, event: Event, wait: bool) -> asyncio.Future[Any]:
        """Hold a caller's event back until the open run is over; the future gets its outcome."""
        loop = self.bind_loop()
        assert loop is not None, "a run is only left open on a loop"
        outcome: asyncio.Future[Any] = loop.create_future()
        self.backlog.append((event, outcome, wait))
        self._ensure_driver(loop)
        return outcome

    def _ensure_driver(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.driver is None:
            self.driver = loop.create_task(self._drive())

    async def _drive(self) -> None:
        """Continue the open run a slice per loop turn, then run the backlog, one a turn."""
        try:
            while self.done is not None or self.backlog:
                await asyncio.sleep(0)
                if self.done is not None:
                    self._continue_run()
                elif self.backlog:
                    self._run_backlogged()
        finally:
            self.driver = None

    def _continue_run(self) -> None:
        """One more slice of the open run; at its end, resolve its future and catch up."""
        core = self.core
        done = self.done
        assert done is not None
        # While the slice runs the run is not "left open": a send from an action joins it.
        self.done = None
        result = core._result
        try:
            finished = core._advance(result)
            if finished:
                core._close_run(result)
        except BaseException as exc:
            core._abandon_run()
            if not isinstance(exc, Exception):
                raise
            _settle(done, exc=exc)
            self._catch_up()
            return
        if not finished:
            self.done = done
            return
        _settle(done, value=core._receipt(result))
        self._catch_up()

    def _run_backlogged(self) -> None:
        """Run the oldest held-back event as its own run, after what came due meanwhile."""
        self._catch_up()
        if self.done is not None:
            return
        # A caller that stopped awaiting still sent the event: it runs, its outcome unread.
        event, outcome, wait = self.backlog.popleft()
        try:
            receipt, pending, keep = self.submit(event, wait)
        except Exception as exc:
            _settle(outcome, exc=exc)
            return
        if pending is None:
            _settle(outcome, value=receipt)
        else:
            _forward(pending, outcome, keep)

    def _catch_up(self) -> None:
        """Deliver what waited for the run: posted events, timers that came due."""
        core = self.core
        if core._status != RUNNING or core._processing:
            return
        try:
            if core._mailbox:
                delivery.drain_mailbox(core)
            if core._timer_heap and not delivery.run_open(core):
                delivery.fire_due(core, core.clock.now())
        except Exception:
            logger.exception("machine %r: an event that waited for a long run failed", core.id)
        core._timers_armed()


def _settle(
    outcome: asyncio.Future[Any], *, value: Receipt | None = None, exc: Exception | None = None
) -> None:
    """Resolve a future unless its waiter gave up on it (a cancelled ``await``)."""
    if outcome.done():
        return
    if exc is not None:
        outcome.set_exception(exc)
    else:
        outcome.set_result(value)


def _forward(source: asyncio.Future[Any], target: asyncio.Future[Any], keep: bool) -> None:
    """Give ``target`` the outcome of ``source`` (the receipt only if ``keep``)."""

    def copy(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            target.cancel()
            return
        error = done.exception()
        if isinstance(error, Exception):
            _settle(target, exc=error)
        else:
            _settle(target, value=done.result() if keep else None)

    source.add_done_callback(copy)
