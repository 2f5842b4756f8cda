"""Interpreter: the asyncio driver of the same step code ``SyncInterpreter`` runs.

The step itself never awaits; what the async driver adds is how work arrives. Services that
return an awaitable run as tasks on the loop and report back through ``onDone``/``onError``;
events from other threads are drained by the loop; with a ``WallClock`` the loop wakes the
interpreter when its next timer is due; a long run (a chain of raised events) gives the loop
a turn every ``YIELD_EVERY`` microsteps (see :mod:`~xsm_celery.engine.chains`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from xsm_celery.engine import chains, delivery, services
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
    from xsm_celery.engine.runtime import StepResult

__all__ = ["Interpreter", "Sent"]

logger = logging.getLogger("xsm_celery.engine")


T = TypeVar("T")


class Sent(Generic[T]):
    """What ``Interpreter.send()`` returns: awaiting it yields the receipt (or None).

    Usually the event has run by the time ``send()`` returns and awaiting yields to the loop
    once. When it started a run longer than one slice, or arrived while such a run was
    open, ``pending`` is the future of its outcome: awaiting waits for it, and raises the
    run's error (``RunawayChainError``) if it ended in one.
    """

    __slots__ = ("keep", "pending", "receipt")

    def __init__(
        self, receipt: T, pending: asyncio.Future[Any] | None = None, keep: bool = True
    ) -> None:
        self.receipt = receipt
        self.pending = pending
        self.keep = keep

    def __await__(self) -> Generator[Any, None, T]:
        if self.pending is None:
            yield from asyncio.sleep(0).__await__()
            return self.receipt
        outcome = yield from self.pending.__await__()
        return outcome if self.keep else None  # type: ignore[return-value]


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
        #: Async services started before the interpreter had a loop (a ``from_snapshot``
        #: with ``restart_services`` outside one): they become tasks once it has one.
        self._awaiting_loop: list[tuple[StateNode, ActorRef, Any]] = []
        #: A long run left open between slices, and the callers' events waiting for it.
        self._open_run = chains.OpenRun(self, self._bind_loop)
        super()._setup(machine, clock, context)
        self._yield_every = chains.YIELD_EVERY

    def _bind_loop(self) -> asyncio.AbstractEventLoop | None:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return None
            self._resume_on_loop(self._loop)
        return self._loop

    def _resume_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """First call on a loop: take up what a restore outside any loop had to leave.

        ``from_snapshot`` is a plain call, often made before the loop runs; the timers it
        re-armed then have no wake-up and the async services it restarted no task. Both are
        scheduled here, for this interpreter and its child machines, so that ``await
        start()`` (or the first ``send()``) resumes a restored interpreter on its own.
        """
        waiting, self._awaiting_loop = self._awaiting_loop, []
        for node, actor, awaitable in waiting:
            if actor.stopped:
                _discard(awaitable)
            else:
                self._run_task(loop, node, actor, awaitable)
        if self._timer_heap:
            self._timers_armed()
        for actor in list(self.children.values()):
            if isinstance(actor.child, Interpreter):
                actor.child._bind_loop()

    def _begin(self) -> None:
        self._bind_loop()
        super()._begin()

    async def start(self) -> Interpreter:
        """Enter the initial states and settle them; returns ``self``.

        Raises:
            RunawayChainError: the initial chain does not settle within
                ``machine.max_iterations``.
        """
        self._bind_loop()
        self._begin()
        started = self._open_run.done
        if started is not None:
            await started
        else:
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
        A run longer than ``YIELD_EVERY`` microsteps goes on after ``send()`` returns,
        giving the loop a turn between slices; awaiting waits for its end. Events sent by
        other coroutines meanwhile run after it, in order.

        Raises:
            InvalidEventError: not an event, or a payload nested deeper than
                ``MAX_EVENT_DEPTH``.
            RunawayChainError: (on ``send()`` or on awaiting it) the run does not settle
                within ``machine.max_iterations``.
        """
        self._bind_loop()
        receipt, pending, keep = self._open_run.submit(to_event(event_or_type, payload), wait)
        return Sent(receipt, pending, keep)

    def send_events(self, events: Any) -> Sent[None]:
        """Send each event of an iterable in order; await to wait until the last has run."""
        last: Sent[Any] = Sent(None)
        for event in events:
            last = self.send(event)
        return last

    def _suspend(self, result: StepResult) -> None:
        self._open_run.suspend(result)

    def _defer_event(self, event: Event, wait: bool) -> Receipt | None:
        self._open_run.defer(event, wait)
        return None

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
        actor = track_actor(self, inv, node)
        loop = self._bind_loop()
        if loop is None:
            self._awaiting_loop.append((node, actor, result))
            return
        self._run_task(loop, node, actor, result)

    def _run_task(
        self, loop: asyncio.AbstractEventLoop, node: StateNode, actor: ActorRef, result: Any
    ) -> None:
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
        waiting, self._awaiting_loop = self._awaiting_loop, []
        for _node, _actor, awaitable in waiting:
            _discard(awaitable)
        super()._halt()


def _discard(awaitable: Any) -> None:
    """Close a coroutine that will never run, so it is not reported as never awaited."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()
