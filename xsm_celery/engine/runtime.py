"""The interpreter core both drivers share: run-to-completion steps over a configuration.

One event is processed as SCXML does it: select the enabled transitions, take them together
as one microstep (exit, transition actions, enter), then take eventless (``always``)
transitions until none is enabled, then process the internal events the step raised
(``done.state``, a finished service) the same way, and start the invocations of states that
are still active. Events sent from inside (an action calling ``send``) wait until that has
settled. :class:`SyncInterpreter` and the async :class:`Interpreter` only add how events
arrive; the step is this one.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.engine.clock import Clock, WallClock
from xsm_celery.engine.delivery import Delivery
from xsm_celery.engine.effects import EffectsMixin, Timer
from xsm_celery.engine.events import EngineEvent, Event, Receipt, done_state_type
from xsm_celery.engine.invoke import ActorRef
from xsm_celery.engine.plugins import dispatch, global_plugins
from xsm_celery.engine.selection import Selection
from xsm_celery.engine.snapshot import Snapshots
from xsm_celery.engine.state import DONE, NOT_STARTED, RUNNING, STOPPED, StateView
from xsm_celery.engine.step import Plan, initial_plan
from xsm_celery.errors import InterpreterStoppedError, RunawayChainError

if TYPE_CHECKING:
    from xsm_celery.engine.machine import Machine

__all__ = ["NOT_STARTED", "RUNNING", "DONE", "STOPPED", "Core"]

logger = logging.getLogger("xsm_celery.engine")

_INIT = "xstate.init"


class Core(StateView, Selection, Delivery, Snapshots, EffectsMixin):
    """State and step loop of an interpreter; the drivers add the public send/start/stop."""

    def __init__(self, machine: Machine, clock: Clock | None = None) -> None:
        self._setup(machine, clock, copy.deepcopy(machine.initial_context))

    def _setup(self, machine: Machine, clock: Clock | None, context: dict[str, Any]) -> None:
        self.machine = machine
        self.clock = clock if clock is not None else WallClock()
        self._context = context
        self._config: frozenset[StateNode] = frozenset()
        self._leaves: tuple[StateNode, ...] = ()
        self._status = NOT_STARTED
        self._plugins: list[Any] = global_plugins()
        self._queue: deque[Event] = deque()
        self._internal: deque[EngineEvent] = deque()
        self._pending_invokes: list[StateNode] = []
        self._processing = False
        self._timer_heap: list[tuple[float, int, Timer]] = []
        self._timers_by_state: dict[StateNode, list[Timer]] = {}
        self._timer_seq = itertools.count()
        self._actors: dict[StateNode, list[ActorRef]] = {}
        self.children: dict[str, ActorRef] = {}
        self._mailbox: deque[Event] = deque()
        self._mailbox_lock = threading.Lock()
        self._cache = machine.step_cache
        self._steps = 0
        self._taken = 0
        self._denied = False
        self._run_error: BaseException | None = None
        self._finishing: StateNode | None = None
        self.last_error: BaseException | None = None
        self.output: Any = None
        self.store_key: str | None = None

    def use(self, plugin: Any) -> Any:
        """Attach a plugin (before or after start); returns the interpreter for chaining."""
        if all(p is not plugin for p in self._plugins):
            self._plugins.append(plugin)
        return self

    @property
    def plugins(self) -> tuple[Any, ...]:
        """The attached plugins, in the order their hooks run."""
        return tuple(self._plugins)

    def _begin(self) -> None:
        """Enter the initial configuration and settle it (the body of ``start()``)."""
        if self._status == RUNNING:
            return
        if self._status != NOT_STARTED:
            raise InterpreterStoppedError(
                f"interpreter {self.id!r} is {self._status}; create a new one or restore a "
                "snapshot instead of starting it again"
            )
        self._status = RUNNING
        self.clock.attach(self)
        if self._plugins:
            dispatch(self, self._plugins, "on_interpreter_start", ())
        cached = self._cache.get(_INIT)
        if cached is None:
            root = self.machine.root
            cached = self._cache[_INIT] = (initial_plan(root), Transition(root, _INIT, ""))
        plan, trans = cached
        self._guarded(lambda event: self._initial_step(plan, event, trans),
                      EngineEvent(_INIT, None, self.machine.id))  # fmt: skip

    def _initial_step(self, plan: Plan, event: Event, trans: Transition) -> bool:
        self._apply(plan, (), event, (trans,))
        self._settle(event)
        if self._internal or self._pending_invokes:
            self._settle_internal()
        return False

    def _drain_queue(self) -> None:
        handled = 0
        queue = self._queue
        while queue and self._status == RUNNING:
            handled += 1
            if handled > self.machine.chain_limit:
                raise RunawayChainError(
                    f"machine {self.id!r}: actions kept sending events "
                    f"({self.machine.chain_limit} in one send) without settling",
                    limit=self.machine.chain_limit,
                )
            self._steps = 0
            self._process(queue.popleft())
        queue.clear()

    def _run(self, event: Event) -> bool:
        """Process one admitted event to completion, then whatever it queued.

        Returns whether the event was denied (handled here, but every guard said no).
        """
        return self._guarded(self._process, event)

    def _guarded(self, body: Callable[[Event], bool], event: Event) -> bool:
        """Run ``body(event)`` as one step: processing flag set, queued events drained after.

        If the step raises (a runaway chain), queued and internal events are dropped so the
        next send starts clean; the configuration is whatever the last whole microstep left.
        """
        self._processing = True
        self._run_error = None
        self._steps = 0
        try:
            denied = body(event)
            if self._queue:
                self._drain_queue()
        except BaseException:
            self._queue.clear()
            self._internal.clear()
            self._pending_invokes.clear()
            raise
        finally:
            self._processing = False
        return denied

    def _process(self, event: Event) -> bool:
        """One event: its transitions, the eventless chain, internal events, invocations."""
        plugins = self._plugins
        taken = self._taken
        if plugins:
            dispatch(self, plugins, "on_event_received", (event,))
        self._denied = False
        selected = self._select(event)
        if selected:
            self._microstep(selected, event)
        denied = self._denied and not selected
        self._settle(event)
        if plugins:
            receipt = Receipt(
                frozenset(s.id for s in self._leaves),
                self._taken != taken,
                self._run_error,
                False,
                denied,
            )
            dispatch(self, plugins, "on_event_processed", (event, receipt))
        if self._internal or self._pending_invokes:
            self._settle_internal()
        return denied

    def _settle(self, event: Event) -> None:
        """Take eventless transitions until none is enabled."""
        if not self.machine.has_always:
            return
        while self._status == RUNNING:
            selected = self._select_eventless(event)
            if not selected:
                return
            self._microstep(selected, event)

    def _run_pending_invokes(self) -> None:
        """Start invocations queued outside a step (a restore with ``restart_services``)."""
        self._guarded(self._restart_step, Event(_INIT))

    def _restart_step(self, event: Event) -> bool:
        self._settle_internal()
        return False

    def _settle_internal(self) -> None:
        """Process internal events and start pending invocations until neither is left."""
        while self._status == RUNNING:
            if self._internal:
                self._process(self._internal.popleft())
            elif self._pending_invokes:
                self._start_pending_invokes()
            else:
                return
        self._internal.clear()
        self._pending_invokes.clear()

    def _microstep(self, transitions: tuple[Transition, ...], event: Event) -> None:
        self._steps += 1
        if self._steps > self.machine.chain_limit:
            raise RunawayChainError(
                f"machine {self.id!r}: more than {self.machine.chain_limit} microsteps for "
                f"event {event.type!r}; an 'always' cycle or done-event loop never settles "
                f"(now in {sorted(s.id for s in self._leaves)})",
                limit=self.machine.chain_limit,
            )
        self._taken += 1
        config = self._config
        key = (config, transitions)
        plan = self._cache.get(key)
        if plan is None:
            from xsm_celery.engine.step import plan as compute

            plan = compute(config, transitions, self._cache)
        self._apply(plan, transitions, event, transitions)

    def _apply(
        self,
        plan: Plan,
        transitions: tuple[Transition, ...],
        event: Event,
        reported: tuple[Transition, ...],
    ) -> None:
        """Carry out a plan: exit, transition actions, enter; then report the transitions."""
        before = self._config
        for node in plan.exits:
            if node.exit:
                self._run_actions(node.exit, event)
            if self._timers_by_state and node in self._timers_by_state:
                self._cancel_timers(node)
            if self._actors and node in self._actors:
                self._stop_actors(node)
        for trans in transitions:
            if trans.actions:
                self._run_actions(trans.actions, event)
        self._config = plan.config
        self._leaves = plan.leaves
        finals: list[StateNode] | None = None
        for node in plan.entries:
            if node.entry:
                self._run_actions(node.entry, event)
            if node.after:
                self._arm_timers(node, event)
            if node.invoke:
                self._pending_invokes.append(node)
            if node.type == "final":
                if finals is None:
                    finals = []
                finals.append(node)
        if finals is not None:
            self._finals_entered(finals)
        if self._plugins:
            for trans in reported:
                dispatch(self, self._plugins, "on_transition", (set(before), set(plan.config),
                                                                 trans))  # fmt: skip
        if self._finishing is not None:
            self._finish(self._finishing)

    def _finals_entered(self, finals: list[StateNode]) -> None:
        """Raise ``done.state`` for completed parents, then for completed parallel states.

        Parents first, in entry order, then each parallel ancestor whose regions are all
        final: the order SCXML gives when several regions finish in one step.
        """
        root = self.machine.root
        parents: list[StateNode] = []
        for node in finals:
            parent = node.parent
            if parent is None or parent in parents:
                continue
            if parent is root:
                self._finishing = node
                return
            parents.append(parent)
            self._internal.append(EngineEvent(done_state_type(parent.id), node.output, parent.id))
        raised: set[StateNode] = set()
        for parent in parents:
            grand = parent.parent
            while grand is not None and grand.type == "parallel" and grand not in raised:
                if not self._in_final(grand):
                    break
                if grand is root:
                    self._finishing = finals[-1]
                    return
                raised.add(grand)
                self._internal.append(EngineEvent(done_state_type(grand.id), None, grand.id))
                grand = grand.parent

    def _in_final(self, node: StateNode) -> bool:
        """Whether a compound state sits in a final child, or every region of a parallel does."""
        if node.type == "parallel":
            return all(self._in_final(child) for child in node.children)
        if node.type == "compound":
            return any(c.type == "final" and c in self._config for c in node.children)
        return node.type == "final"

    def _finish(self, final: StateNode) -> None:
        """The machine reached a top-level final state: it is done."""
        self._finishing = None
        self._status = DONE
        self.output = final.output if final.output is not None else self.machine.root.output
        self._internal.clear()
        self._pending_invokes.clear()
        self._queue.clear()
        self._cancel_all_timers()
        self._stop_all_actors()
        self.clock.detach(self)
        if self._plugins:
            dispatch(self, self._plugins, "on_done", (self.output,))

    def _halt(self) -> None:
        """Stop: cancel timers, clean up actors, detach from the clock (``stop()``'s body)."""
        if self._status in (STOPPED,):
            return
        was_running = self._status == RUNNING
        self._cancel_all_timers()
        self._stop_all_actors()
        self.clock.detach(self)
        if self._status != DONE:
            self._status = STOPPED
        with self._mailbox_lock:
            self._mailbox.clear()
        if was_running and self._plugins:
            dispatch(self, self._plugins, "on_interpreter_stop", ())
