"""What entering and exiting states sets in motion: actions, ``after`` timers, invocations.

A mixin of the interpreter core, split out so that the step loop in
:mod:`xsm_celery.engine.runtime` reads as the algorithm and this module as its side effects.
Every user callable here is contained: an action or a delay function that raises, or a
service that fails, is recorded and reported, and the machine carries on.
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import logging
import math
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import EngineEvent, Event
from xsm_celery.engine.invoke import ActorRef, CallbackLogic
from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.redact import mask_text, secret_values
from xsm_celery.errors import AsyncServiceError, ConfigurationError, ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef, AfterDef, InvokeDef, StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.machine import Machine

__all__ = ["EffectsMixin", "Timer"]

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


class EffectsMixin:
    """Actions, timers and invocations of the interpreter core."""

    machine: Machine
    clock: Clock
    _context: dict[str, Any]
    _config: frozenset[StateNode]
    _plugins: list[Any]
    _internal: deque[EngineEvent]
    _pending_invokes: list[StateNode]
    _processing: bool
    _timer_heap: list[tuple[float, int, Timer]]
    _timers_by_state: dict[StateNode, list[Timer]]
    _actors: dict[StateNode, list[ActorRef]]
    children: dict[str, ActorRef]
    last_error: BaseException | None
    _run_error: BaseException | None
    _timer_seq: itertools.count[int]

    def _run_actions(self, actions: tuple[ActionDef, ...], event: Event) -> None:
        """Run an action list in order; the first that raises ends the list, contained."""
        ctx = self._context
        plugins = self._plugins
        action = actions[0]
        try:
            for action in actions:
                if plugins:
                    dispatch(self, plugins, "on_action_execute", (action,))
                action.fn(self, ctx, event, action)  # type: ignore[misc]
        except Exception as exc:
            self._action_failed(action, exc, event)

    def _action_failed(self, action: ActionDef, exc: Exception, event: Event) -> None:
        error: Exception = exc
        if action.fn is None:
            error = ImplementationMissingError("action", action.type, path=action.path)
        # The message is masked (a secret of the event or the context echoed in it, or a
        # token shape), and the traceback's frames follow without the unmasked message.
        secrets = secret_values([getattr(event, "payload", None), getattr(self, "context", None)])
        logger.error(
            "machine %r: action %r raised on event %r; rest of its list skipped: %s\n%s",
            self.machine.id, action.type, event.type,
            mask_text(f"{type(error).__name__}: {error}", secrets),
            "".join(traceback.format_tb(error.__traceback__)).rstrip(),
        )  # fmt: skip
        self._record_error(error)
        if self._plugins:
            dispatch(self, self._plugins, "on_action_error", (action, error))

    def _record_error(self, error: BaseException) -> None:
        self.last_error = error
        if self._run_error is None:
            self._run_error = error

    def _arm_timers(self, node: StateNode, event: Event) -> None:
        """Start the ``after`` timers of a state just entered."""
        now = self.clock.now()
        for after in node.after:
            delay = after.delay_ms
            if delay is None:
                delay = self._named_delay(after, event)
                if delay is None:
                    continue
            timer = Timer(now + delay, node, after, delay)
            heapq.heappush(self._timer_heap, (timer.due, next(self._timer_seq), timer))
            self._timers_by_state.setdefault(node, []).append(timer)
        self._timers_armed()

    def _timers_armed(self) -> None:
        """Hook for drivers that must schedule a wake-up (the async interpreter)."""

    def _named_delay(self, after: AfterDef, event: Event) -> float | None:
        impl = after.delay_fn
        try:
            if impl is None:
                raise ImplementationMissingError("delay", after.key, path=after.path)
            value = impl(self._context, event) if callable(impl) else impl
            delay = float(value)
            if not math.isfinite(delay) or delay < 0:
                raise ConfigurationError(f"delay {after.key!r} gave {value!r}; need finite ms >= 0")
        except Exception as exc:
            logger.error(
                "machine %r: delay %r failed; its timer is not armed", self.machine.id,
                after.key, exc_info=exc,
            )  # fmt: skip
            self._record_error(exc)
            return None
        return delay

    def _cancel_timers(self, node: StateNode) -> None:
        for timer in self._timers_by_state.pop(node, ()):
            timer.cancelled = True
        heap = self._timer_heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if len(heap) > 64:
            live = sum(len(timers) for timers in self._timers_by_state.values())
            if len(heap) > 2 * live:
                heap[:] = [entry for entry in heap if not entry[2].cancelled]
                heapq.heapify(heap)

    def _cancel_all_timers(self) -> None:
        for timers in self._timers_by_state.values():
            for timer in timers:
                timer.cancelled = True
        self._timers_by_state.clear()
        self._timer_heap.clear()

    def _pop_due_timer(self, now: float) -> Timer | None:
        heap = self._timer_heap
        while heap and heap[0][0] <= now:
            timer = heapq.heappop(heap)[2]
            if timer.cancelled:
                continue
            timers = self._timers_by_state.get(timer.node)
            if timers is not None:
                timers.remove(timer)
                if not timers:
                    del self._timers_by_state[timer.node]
            return timer
        return None

    def pending_timers(self) -> list[Timer]:
        """The armed ``after`` timers, earliest first."""
        return sorted((t for t in self._iter_timers()), key=lambda t: t.due)

    def _iter_timers(self) -> list[Timer]:
        return [t for ts in self._timers_by_state.values() for t in ts if not t.cancelled]

    def _start_pending_invokes(self) -> None:
        """Start the invocations of states entered during the step that are still active."""
        pending, self._pending_invokes = self._pending_invokes, []
        seen: set[StateNode] = set()
        for node in pending:
            if node in seen or node not in self._config or node in self._actors:
                continue
            seen.add(node)
            for inv in node.invoke:
                self._start_invocation(inv, node)

    def _start_invocation(self, inv: InvokeDef, node: StateNode) -> None:
        impl = inv.impl
        event = Event(f"invoke.{inv.id}", {"input": {} if inv.input is None else inv.input})
        if self._plugins:
            dispatch(self, self._plugins, "on_service_start", (inv,))
        if impl is None:
            self._service_failed(inv, ImplementationMissingError("service", inv.src, path=inv.path))
            return
        if isinstance(impl, CallbackLogic):
            self._start_actor(inv, node, impl, event)
            return
        try:
            result = impl(self, self._context, event)
        except Exception as exc:
            self._service_failed(inv, exc)
            return
        if inspect.isawaitable(result):
            self._start_awaitable(inv, node, result)
            return
        self._service_done(inv, result)

    def _service_done(self, inv: InvokeDef, result: Any) -> None:
        if self._plugins:
            dispatch(self, self._plugins, "on_service_done", (inv, result))
        self._internal.append(EngineEvent(inv.done_type, result, inv.id))

    def _service_failed(self, inv: InvokeDef, exc: BaseException) -> None:
        if not inv.on_error:
            logger.warning(
                "machine %r: service %r failed with %s: %s and has no onError",
                self.machine.id, inv.src, type(exc).__name__, exc,
            )  # fmt: skip
        if self._plugins:
            dispatch(self, self._plugins, "on_service_error", (inv, exc))
        self._internal.append(EngineEvent(inv.error_type, exc, inv.id))

    def _start_actor(
        self, inv: InvokeDef, node: StateNode, logic: CallbackLogic, event: Event
    ) -> None:
        actor = ActorRef(self, inv)
        self._actors.setdefault(node, []).append(actor)
        self.children[inv.id] = actor
        try:
            cleanup = logic.setup(actor.send_back, actor.receive, self._context, event)
        except Exception as exc:
            self._forget_actor(node, actor)
            actor.stop()
            self._service_failed(inv, exc)
            return
        if callable(cleanup):
            actor.cleanup = cleanup

    def _start_awaitable(self, inv: InvokeDef, node: StateNode, result: Any) -> None:
        """A service returned an awaitable: only the async interpreter can run it."""
        if inspect.iscoroutine(result):
            result.close()
        self._service_failed(
            inv,
            AsyncServiceError(
                f"service {inv.src!r} is async; SyncInterpreter runs sync services only, "
                "use the async Interpreter"
            ),
        )

    def _forget_actor(self, node: StateNode, actor: ActorRef) -> None:
        actors = self._actors.get(node)
        if actors is not None and actor in actors:
            actors.remove(actor)
            if not actors:
                del self._actors[node]
        if self.children.get(actor.id) is actor:
            del self.children[actor.id]

    def _stop_actors(self, node: StateNode) -> None:
        for actor in self._actors.pop(node, ()):
            if self.children.get(actor.id) is actor:
                del self.children[actor.id]
            actor.stop()

    def _stop_all_actors(self) -> None:
        for node in sorted(self._actors, key=lambda n: n.order, reverse=True):
            self._stop_actors(node)

    def send_to(self, actor_id: str, event_or_type: Any, /, **payload: Any) -> None:
        """Send an event to a running callback actor's ``receive`` handlers.

        An unknown or stopped actor id is logged and ignored, as XState ignores sends to a
        child that is gone.
        """
        actor = self.children.get(actor_id)
        if actor is None:
            logger.warning("machine %r: no running actor %r", self.machine.id, actor_id)
            return
        actor.send(event_or_type, **payload)
