"""Interpreter: the asyncio driver of the same step code ``SyncInterpreter`` runs.

The step itself never awaits; what the async driver adds is how work arrives. Services that
return an awaitable run as tasks on the loop and report back through ``onDone``/``onError``;
events from other threads are drained by the loop; with a ``WallClock`` the loop wakes the
interpreter when its next timer is due.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from xsm_celery.engine import delivery, services
from xsm_celery.engine.awaiting import await_value
from xsm_celery.engine.effects import action_failed
from xsm_celery.engine.events import Event, Receipt, to_event
from xsm_celery.engine.invoke import ActorRef, forget_actor, track_actor
from xsm_celery.engine.runtime import RUNNING, Core
from xsm_celery.engine.state import NOT_STARTED
from xsm_celery.errors import WaitTimeoutError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef, InvokeDef, StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.machine import Machine

__all__ = ["Interpreter", "Sent"]

logger = logging.getLogger("xsm_celery.engine")


T = TypeVar("T")


class Sent(Generic[T]):
    """What ``Interpreter.send()`` returns: the event has run; awaiting yields to the loop once."""

    __slots__ = ("receipt",)

    def __init__(self, receipt: T) -> None:
        self.receipt = receipt

    def __await__(self) -> Generator[Any, None, T]:
        yield from asyncio.sleep(0).__await__()
        return self.receipt


class Interpreter(Core):
    """Run a machine inside an asyncio event loop: ``await start()``, ``await send()``.

    Charts, logic and plugins are the ones ``SyncInterpreter`` takes; services may also be
    ``async def``. Use it from one event loop; other threads use ``send_threadsafe``.
    """

    def __init__(self, machine: Machine, clock: Clock | None = None, *, input: Any = None) -> None:
        super().__init__(machine, clock, input=input)

    def _setup(self, machine: Machine, clock: Clock | None, context: dict[str, Any]) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_handle: asyncio.TimerHandle | None = None
        self._wake_due: float | None = None
        self._action_tasks: set[asyncio.Task[Any]] = set()
        super()._setup(machine, clock, context)

    def _bind_loop(self) -> asyncio.AbstractEventLoop | None:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return None
        return self._loop

    def _begin(self) -> None:
        self._bind_loop()
        super()._begin()

    async def start(self) -> Interpreter:
        """Enter the initial states and settle them; returns ``self``."""
        self._bind_loop()
        self._begin()
        await asyncio.sleep(0)
        return self

    @overload
    def send(
        self, event_or_type: Any, /, *, wait: Literal[False] = ..., **payload: Any
    ) -> Sent[None]: ...

    @overload
    def send(
        self, event_or_type: Any, /, *, wait: Literal[True], **payload: Any
    ) -> Sent[Receipt]: ...

    def send(self, event_or_type: Any, /, *, wait: bool = False, **payload: Any) -> Sent[Any]:
        """Process an event to completion (see ``SyncInterpreter.send``); await to yield once.

        The event is processed when ``send()`` is called, so an action (a plain function)
        may call ``interp.send(...)`` without awaiting it, exactly as on ``SyncInterpreter``;
        ``await interp.send(...)`` then gives the loop one turn and returns the receipt.
        """
        self._bind_loop()
        return Sent(self._send(to_event(event_or_type, payload), wait))

    def send_events(self, events: Any) -> Sent[None]:
        """Send each event of an iterable in order; await to yield to the loop once."""
        for event in events:
            self._send(to_event(event, {}), False)
        return Sent(None)

    async def wait_for(
        self,
        condition: Callable[[Interpreter], bool] | str,
        *,
        timeout: float | None = 10.0,
        poll_s: float = 0.005,
    ) -> Interpreter:
        """Wait until ``condition(interp)`` holds, or the state ``condition`` is active.

        Returns the interpreter. XState's ``waitFor(actor, predicate, {timeout})``.

        Raises:
            TimeoutError: it does not hold within ``timeout`` seconds, or the machine
                stopped or finished first.
            StateNotFoundError: ``condition`` names a state the chart does not have.
        """
        check: Callable[[Interpreter], bool]
        if isinstance(condition, str):
            state = condition
            check = lambda interp: interp.matches(state)  # noqa: E731
        else:
            check = condition
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not check(self):
            if self._status not in (RUNNING, NOT_STARTED):
                raise WaitTimeoutError(
                    f"machine {self.id!r} is {self._status} in {sorted(self.current_state_ids)}; "
                    "the condition can no longer become true"
                )
            if deadline is not None and loop.time() >= deadline:
                raise WaitTimeoutError(
                    f"machine {self.id!r}: condition not met within {timeout}s (now in "
                    f"{sorted(self.current_state_ids)})"
                )
            self.tick()
            await asyncio.sleep(poll_s)
        return self

    async def to_promise(self, *, timeout: float | None = None) -> Any:
        """Wait until the machine is done and return its ``output`` (XState's ``toPromise``).

        Raises:
            TimeoutError: not done within ``timeout`` seconds, or stopped first.
        """
        await self.wait_for(lambda interp: interp.status == "done", timeout=timeout)
        return self.output

    async def stop(self) -> None:
        """Stop: cancel timers and tasks, run actor cleanups. Idempotent."""
        self._cancel_wake()
        self._halt()
        await asyncio.sleep(0)

    def _wake(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(delivery.drain_mailbox, self)
        except RuntimeError:
            logger.debug("machine %r: event loop closed; mailbox left for tick()", self.id)

    def _timers_armed(self) -> None:
        if self.clock.is_simulated or not self._timer_heap:
            return
        loop = self._bind_loop()
        if loop is None:
            return
        due = self._timer_heap[0][0]
        if self._wake_due is not None and self._wake_due <= due:
            return
        self._cancel_wake()
        self._wake_due = due
        delay_s = max(0.0, (due - self.clock.now()) / 1000.0)
        self._wake_handle = loop.call_later(delay_s, self._on_wake)

    def _on_wake(self) -> None:
        self._wake_handle = None
        self._wake_due = None
        if self._status == RUNNING and not self._processing:
            delivery.fire_due(self, self.clock.now())
        self._timers_armed()

    def _cancel_wake(self) -> None:
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        self._wake_handle = None
        self._wake_due = None

    def _start_awaitable(self, inv: InvokeDef, node: StateNode, result: Any) -> None:
        loop = self._bind_loop()
        if loop is None:
            super()._start_awaitable(inv, node, result)
            return
        actor = track_actor(self, inv, node)
        task = loop.create_task(await_value(result))
        actor.task = task
        task.add_done_callback(lambda t: self._task_finished(node, actor, t))

    def _start_async_action(self, action: ActionDef, awaitable: Any, event: Event) -> None:
        loop = self._bind_loop()
        if loop is None:
            super()._start_async_action(action, awaitable, event)
            return
        task = loop.create_task(await_value(awaitable))
        self._action_tasks.add(task)
        task.add_done_callback(lambda t: self._action_finished(action, event, t))

    def _action_finished(self, action: ActionDef, event: Event, task: asyncio.Task[Any]) -> None:
        self._action_tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, Exception):
            self.last_error = action_failed(self, action, error, event)

    def _task_finished(self, node: StateNode, actor: ActorRef, task: asyncio.Task[Any]) -> None:
        if actor.stopped or task.cancelled():
            return
        forget_actor(self, node, actor)
        actor.stopped = True
        inv = actor.definition
        error = task.exception()
        if error is not None:
            services.service_failed(self, inv, error)
        else:
            services.service_done(self, inv, task.result())
        if self._processing:
            return
        if self._status == RUNNING:
            self._run(Event("xstate.service"), self._settle_queued)
        else:
            self._internal.clear()

    def _halt(self) -> None:
        self._cancel_wake()
        for task in list(self._action_tasks):
            task.cancel()
        self._action_tasks.clear()
        super()._halt()
