"""The interpreter core both drivers share: the run loop, read top to bottom.

One event is processed as SCXML does it: select the enabled transitions, take them together
as one microstep (exit, transition actions, enter), then take eventless (``always``)
transitions until none is enabled, then process the internal events the step raised
(``done.state``, a finished service) the same way, and start the invocations of states that
are still active. Events sent from inside (an action calling ``send``) wait until that has
settled. :class:`SyncInterpreter` and the async :class:`Interpreter` only add how events
arrive; the step is this one.

Each phase is a function that returns what it decided: selection
(:mod:`~xsm_celery.engine.selection`) returns the transitions, or ``None``, or ``DENIED``;
:func:`~xsm_celery.engine.step.plan` returns the states to exit and enter; an action list
(:mod:`~xsm_celery.engine.effects`) returns the error that ended it; arming timers
(:mod:`~xsm_celery.engine.timers`) returns a failed delay's error. The loop below collects
those decisions in one :class:`StepResult` per admitted event, which becomes the receipt.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from xsm_celery.engine import delivery, services, timers
from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.engine.children import child_finished
from xsm_celery.engine.clock import Clock, WallClock
from xsm_celery.engine.context_model import check_context_depth
from xsm_celery.engine.effects import run_actions
from xsm_celery.engine.events import (
    ENGINE_EVENT_PREFIXES,
    EngineEvent,
    Event,
    Receipt,
    done_state_type,
    to_event,
)
from xsm_celery.engine.plugins import dispatch, global_plugins, replaced_plugins
from xsm_celery.engine.redact import public_context
from xsm_celery.engine.selection import select_eventless, select_transitions
from xsm_celery.engine.snapshot import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    dump,
    persisted_snapshot,
    restore,
    snapshot_dict,
)
from xsm_celery.engine.state import DONE, NOT_STARTED, RUNNING, STOPPED, StateView
from xsm_celery.engine.step import Plan, initial_plan, plan, record_history
from xsm_celery.errors import (
    ArgumentTypeError,
    AsyncServiceError,
    ContextValidationError,
    InterpreterStoppedError,
    RunawayChainError,
    SnapshotCorruptError,
)

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef, InvokeDef
    from xsm_celery.engine.machine import Machine
    from xsm_celery.engine.timers import Timer

__all__ = [
    "DONE",
    "NOT_STARTED",
    "RUNNING",
    "STOPPED",
    "Core",
    "StepResult",
    "Subscription",
    "initial_context",
]

_INIT = "xstate.init"

CoreT = TypeVar("CoreT", bound="Core")


#: Types whose values ``copy.deepcopy`` returns as they are.
_ATOMIC = frozenset({str, int, float, bool, type(None)})


def _fresh_copy(context: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a chart's context; a flat dict of scalars is copied shallowly.

    That is the common JSON context (``{"attempt": 0}``), and ``copy.deepcopy`` of it was a
    third of the instructions creating an interpreter takes (the retry loop creates one per
    job); a shallow copy of it is a deep copy, since every value is immutable.
    """
    if type(context) is dict:
        for key, value in context.items():
            if type(key) is not str or type(value) not in _ATOMIC:
                return copy.deepcopy(context)
        return context.copy()
    return copy.deepcopy(context)


def initial_context(machine: Machine, input: Any) -> dict[str, Any]:
    """A fresh context for one interpreter: the chart's (copied), or its factory's result.

    Raises:
        TypeError: a ``context`` callable returned something that is not a dict.
        ContextValidationError: it returned a dict nested deeper than ``MAX_CONTEXT_DEPTH``.
    """
    factory = machine.context_factory
    if factory is None:
        return _fresh_copy(machine.initial_context)
    made = factory({"input": input})
    if not isinstance(made, dict):
        raise ArgumentTypeError(
            f"machine {machine.id!r}: the 'context' callable returned {type(made).__name__}; "
            "return a dict"
        )
    check_context_depth(machine.id, made)
    return made


class StepResult:
    """What running one admitted event decided, collected across its whole run.

    ``taken`` counts microsteps (a targetless transition counts), ``denied`` says the event
    was handled but every guard refused it, ``error`` is the first contained error (an
    action or a delay) of the run. It is the receipt's raw material. Each interpreter keeps
    one and resets it per run (a run is never re-entered), which keeps ``send()`` free of an
    allocation.
    """

    __slots__ = ("denied", "error", "taken")

    def __init__(self) -> None:
        self.taken = 0
        self.denied = False
        self.error: BaseException | None = None


class Subscription:
    """An ``on()`` listener; ``unsubscribe()`` (or calling it) removes it, once."""

    __slots__ = ("_event_type", "_listener", "_listeners")

    def __init__(
        self,
        listeners: dict[str, list[Callable[[Event], Any]]],
        event_type: str,
        listener: Callable[[Event], Any],
    ) -> None:
        self._listeners = listeners
        self._event_type = event_type
        self._listener = listener

    def unsubscribe(self) -> None:
        """Stop listening; a no-op the second time."""
        listeners = self._listeners.get(self._event_type, [])
        if self._listener in listeners:
            listeners.remove(self._listener)

    __call__ = unsubscribe


class Core(StateView):
    """State and run loop of an interpreter; the drivers add the public send/start/stop."""

    def __init__(self, machine: Machine, clock: Clock | None = None, *, input: Any = None) -> None:
        self._setup(machine, clock, initial_context(machine, input))
        self.input = input

    def _setup(self, machine: Machine, clock: Clock | None, context: dict[str, Any]) -> None:
        self.machine = machine
        self.clock = clock if clock is not None else WallClock()
        self._context = context
        self._config = frozenset()
        self._leaves = ()
        self._status = NOT_STARTED
        self._plugins = global_plugins()
        self._queue = deque()
        self._internal = deque()
        self._pending_invokes = []
        self._processing = False
        self._timer_heap = []
        self._timers_by_state = {}
        self._timer_seq = itertools.count()
        self._delayed = []
        self._listeners = {}
        self.parent = None
        self._actor_id = None
        self._invoked_as = None
        self._actors = {}
        self.children = {}
        self._mailbox = deque()
        self._mailbox_lock = threading.Lock()
        self._cache = machine.step_cache
        self._validator = machine.context_validator
        self._result = StepResult()
        self._history = {}
        self._steps = 0
        self._handled = 0
        self._yield_every = 0
        self.last_error = None
        self.output = None
        self.store_key = None
        self.input = None

    def use(self, plugin: Any) -> Any:
        """Attach a plugin (before or after start); returns the interpreter for chaining."""
        if all(p is not plugin for p in self._plugins):
            self._plugins.append(plugin)
        return self

    @property
    def plugins(self) -> tuple[Any, ...]:
        """The attached plugins, in the order their hooks run."""
        return tuple(self._plugins)

    @plugins.setter
    def plugins(self, plugins: list[Any] | tuple[Any, ...]) -> None:
        """Replace every attached plugin, global ones included (0.11.0's ``plugins = [...]``)."""
        self._plugins = replaced_plugins(plugins)

    def _send(self, event: Event, wait: bool) -> Receipt | None:
        """The body of ``send()`` shared by both drivers: admit, catch up, run, report."""
        if self._processing:
            if delivery.admit(self, event):
                self._queue.append(event)
            return None
        if self._status != RUNNING or event.type.startswith(ENGINE_EVENT_PREFIXES):
            delivery.admit(self, event)
            return delivery.refusal(self, event) if wait else None
        if self._mailbox or self._timer_heap:
            if self._mailbox:
                delivery.drain_mailbox(self)
            if self._timer_heap:
                delivery.fire_due(self, self.clock.now())
            if delivery.run_open(self):
                return self._defer_event(event, wait)
        if self._plugins:
            answered = delivery.intercept(self, event)
            if answered is not None:
                return answered if wait else None
        if self._status != RUNNING:
            delivery.admit(self, event)
            return delivery.refusal(self, event) if wait else None
        result = self._run(event)
        return self._receipt(result) if wait else None

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
        self._run(EngineEvent(_INIT, None, self.machine.id), self._enter_initial)

    def _run(
        self, event: Event, body: Callable[[Event, StepResult], bool] | None = None
    ) -> StepResult:
        """Process one admitted event to completion, then whatever actions queued meanwhile.

        ``body`` replaces the event's processing (start-up, restarted services). If the run
        raises (a runaway chain), queued and internal events are dropped so the next send
        starts clean; the configuration is whatever the last whole microstep left. When the
        async driver ends a slice of a long chain, the run stays open (``_processing``) and
        the driver continues it on its loop (:meth:`_suspend`).
        """
        # One record per interpreter, reset per run: a run is never re-entered (a send from
        # inside it is queued), and the caller reads the record before the next run starts.
        result = self._result
        result.taken = 0
        result.denied = False
        result.error = None
        self._processing = True
        self._steps = 0
        try:
            if body is None:
                result.denied = self._process(event, result)
            else:
                result.denied = body(event, result)
            if self._internal or self._pending_invokes or self._queue:
                self._handled = 0
                if not self._advance(result):
                    self._suspend(result)
                    return result
            if self._validator is not None:
                self._record(self._validate_context(), result)
        except BaseException:
            self._abandon_run()
            raise
        self._processing = False
        return result

    def _close_run(self, result: StepResult) -> None:
        """End a continued run (the async driver's) as :meth:`_run` ends one it finishes."""
        try:
            if self._validator is not None:
                self._record(self._validate_context(), result)
        finally:
            self._processing = False

    def _abandon_run(self) -> None:
        """End a run that raised: drop what it left queued so the next send starts clean."""
        self._queue.clear()
        self._internal.clear()
        self._pending_invokes.clear()
        self._processing = False

    def _suspend(self, result: StepResult) -> None:
        """Driver hook: the async interpreter continues a run whose slice ended.

        Only reached when ``_yield_every`` is set, which only the async driver does.
        """
        raise AssertionError("only the async interpreter ends a run's slice early")

    def _defer_event(self, event: Event, wait: bool) -> Receipt | None:
        """Driver hook: catching up left a run open, so the caller's event waits for it.

        Only the async driver leaves a run open; it holds the event in its backlog.
        """
        raise AssertionError("only the async interpreter leaves a run open")

    def _enter_initial(self, event: Event, result: StepResult) -> bool:
        cached = self._cache.get(_INIT)
        if cached is None:
            root = self.machine.root
            cached = self._cache[_INIT] = (initial_plan(root), Transition(root, _INIT, ""))
        start_plan, trans = cached
        self._apply(start_plan, (), event, (trans,), result)
        self._settle(event, result)
        return False

    def _settle_queued(self, event: Event, result: StepResult) -> bool:
        """A run body for work already queued (internal events, invocations to start).

        Nothing to do here: the run works through the queues once its body returns.
        """
        return False

    def _advance(self, result: StepResult) -> bool:
        """Work through the run's queues until they are empty; whether the run is finished.

        Internal events first (``raise``, ``done.state``, a finished service), then the
        invocations of states the run entered, then events actions sent, each queued event
        with a fresh microstep budget. One loop, not a call per event, so a self-feeding
        chain costs no stack: it ends at ``machine.max_iterations`` with
        :class:`RunawayChainError`. With ``_yield_every`` set (the async driver) it returns
        False once that many microsteps have run and work is left, so the driver can let
        other coroutines run before it calls again.
        """
        internal = self._internal
        queue = self._queue
        every = self._yield_every
        slice_end = result.taken + every
        while self._status == RUNNING:
            if internal:
                self._process(internal.popleft(), result)
            elif self._pending_invokes:
                services.start_pending_invokes(self)
            elif queue:
                self._handled += 1
                limit = self.machine.max_iterations
                if self._handled > limit:
                    raise RunawayChainError(
                        f"machine {self.id!r}: actions kept sending events ({limit} in one "
                        "send) without settling; break the cycle or raise the machine's "
                        "max_iterations",
                        limit=limit,
                    )
                self._steps = 0
                self._process(queue.popleft(), result)
            else:
                return True
            if every and result.taken >= slice_end and (internal or queue or self._pending_invokes):
                return False
        internal.clear()
        self._pending_invokes.clear()
        queue.clear()
        return True

    def _process(self, event: Event, result: StepResult) -> bool:
        """One event: its transitions and the eventless chain; the run does the rest.

        Whatever the event raised or queued is left for :meth:`_advance`. Returns whether
        the event was denied (handled, but every guard said no).
        """
        plugins = self._plugins
        taken_before = result.taken
        if plugins:
            dispatch(self, plugins, "on_event_received", (event,))
        selected = select_transitions(self, event)
        if selected:
            self._microstep(selected, event, result)
        denied = selected is not None and not selected
        self._settle(event, result)
        if plugins:
            receipt = Receipt(
                frozenset(s.id for s in self._leaves),
                result.taken != taken_before,
                result.error,
                False,
                denied,
            )
            dispatch(self, plugins, "on_event_processed", (event, receipt))
        return denied

    def _settle(self, event: Event, result: StepResult) -> None:
        """Take eventless transitions until none is enabled."""
        if not self.machine.has_always:
            return
        while self._status == RUNNING:
            selected = select_eventless(self, event)
            if not selected:
                return
            self._microstep(selected, event, result)

    def _microstep(
        self, transitions: tuple[Transition, ...], event: Event, result: StepResult
    ) -> None:
        self._steps += 1
        if self._steps > self.machine.max_iterations:
            limit = self.machine.max_iterations
            raise RunawayChainError(
                f"machine {self.id!r}: more than {limit} microsteps for event {event.type!r}; "
                "an 'always' cycle, a raised event that triggers itself or a done-event loop "
                f"never settles (now in {sorted(s.id for s in self._leaves)}); break the "
                "cycle or raise the machine's max_iterations",
                limit=limit,
            )
        result.taken += 1
        step = self._cache.get((self._config, transitions))
        if step is None:
            step = plan(self._config, transitions, self._cache, self._history)
        self._apply(step, transitions, event, transitions, result)

    def _apply(
        self,
        step: Plan,
        transitions: tuple[Transition, ...],
        event: Event,
        reported: tuple[Transition, ...],
        result: StepResult,
    ) -> None:
        """Carry out a plan: exit, transition actions, enter; then report the transitions."""
        before = self._config
        for node in step.exits:
            if node.history_children:
                record_history(node, before, self._history)
            if node.exit:
                error = run_actions(self, node.exit, event)
                if error is not None:
                    self._record(error, result)
            if self._timers_by_state and node in self._timers_by_state:
                timers.cancel_timers(self, node)
            if self._actors and node in self._actors:
                services.stop_actors(self, node)
        for trans in transitions:
            if trans.actions:
                error = run_actions(self, trans.actions, event)
                if error is not None:
                    self._record(error, result)
        self._config = step.config
        self._leaves = step.leaves
        finals: list[StateNode] | None = None
        for node in step.entries:
            if node.entry:
                error = run_actions(self, node.entry, event)
                if error is not None:
                    self._record(error, result)
            if node.after:
                delay_error = timers.arm_timers(self, node, event)
                if delay_error is not None:
                    self._record(delay_error, result)
            if node.invoke:
                self._pending_invokes.append(node)
            if node.type == "final":
                if finals is None:
                    finals = []
                finals.append(node)
        finished = self._finals_entered(finals) if finals is not None else None
        if self._plugins:
            for trans in reported:
                dispatch(
                    self, self._plugins, "on_transition", (set(before), set(step.config), trans)
                )
        if finished is not None:
            self._finish(finished)

    def _validate_context(self) -> ContextValidationError | None:
        """Run the machine's context validator on the user's keys; write back what it returns."""
        validator = self._validator
        assert validator is not None
        try:
            coerced = validator(public_context(self._context))
        except Exception as exc:
            error = ContextValidationError(self.id, str(exc))
            delivery.logger.error("%s", error)
            return error
        if isinstance(coerced, Mapping):
            self._context.update(coerced)
        return None

    def _record(self, error: BaseException | None, result: StepResult) -> None:
        if error is not None:
            self.last_error = error
            if result.error is None:
                result.error = error

    def _finals_entered(self, finals: list[StateNode]) -> StateNode | None:
        """Raise ``done.state`` for completed parents, then for completed parallel states.

        Parents first, in entry order, then each parallel ancestor whose regions are all
        final: the order SCXML gives when several regions finish in one step. Returns the
        final state that ends the machine, if the root is done.
        """
        root = self.machine.root
        parents: list[StateNode] = []
        for node in finals:
            parent = node.parent
            if parent is None or parent in parents:
                continue
            if parent is root:
                return node
            parents.append(parent)
            self._internal.append(EngineEvent(done_state_type(parent.id), node.output, parent.id))
        raised: set[StateNode] = set()
        for parent in parents:
            grand = parent.parent
            while grand is not None and grand.type == "parallel" and grand not in raised:
                if not self._in_final(grand):
                    break
                if grand is root:
                    return finals[-1]
                raised.add(grand)
                self._internal.append(EngineEvent(done_state_type(grand.id), None, grand.id))
                grand = grand.parent
        return None

    def _in_final(self, node: StateNode) -> bool:
        """Whether a compound state sits in a final child, or every region of a parallel does."""
        if node.type == "parallel":
            return all(self._in_final(child) for child in node.children)
        if node.type == "compound":
            return any(c.type == "final" and c in self._config for c in node.children)
        return node.type == "final"

    def _finish(self, final: StateNode) -> None:
        """The machine reached a top-level final state: it is done."""
        self._status = DONE
        self.output = final.output if final.output is not None else self.machine.root.output
        self._internal.clear()
        self._pending_invokes.clear()
        self._queue.clear()
        timers.cancel_all_timers(self)
        services.stop_all_actors(self)
        self.clock.detach(self)
        if self._plugins:
            dispatch(self, self._plugins, "on_done", (self.output,))
        if self.parent is not None:
            child_finished(self)

    def _halt(self) -> None:
        """Stop: cancel timers, clean up actors, detach from the clock (``stop()``'s body)."""
        if self._status == STOPPED:
            return
        was_running = self._status == RUNNING
        timers.cancel_all_timers(self)
        services.stop_all_actors(self)
        self.clock.detach(self)
        if self._status != DONE:
            self._status = STOPPED
        with self._mailbox_lock:
            self._mailbox.clear()
        if was_running and self._plugins:
            dispatch(self, self._plugins, "on_interpreter_stop", ())

    def _receipt(self, result: StepResult) -> Receipt:
        return Receipt(
            frozenset(s.id for s in self._leaves),
            result.taken > 0,
            result.error,
            False,
            result.denied,
        )

    def tick(self) -> None:
        """Deliver mailbox events and fire the timers that are due by the clock."""
        if self._processing or self._status != RUNNING:
            return
        delivery.drain_mailbox(self)
        if self._timer_heap:
            delivery.fire_due(self, self.clock.now())

    def send_threadsafe(self, event_or_type: Any, /, **payload: Any) -> None:
        """Queue an event from any thread; it runs on the owner's next step.

        A sync interpreter delivers it at its next ``send()``, ``tick()`` or clock
        increment; the async one on its event loop. FIFO per sending thread.
        """
        delivery.post_threadsafe(self, event_or_type, payload)

    def on(self, event_type: str, listener: Callable[[Event], Any]) -> Subscription:
        """Listen to events the machine ``emit``s: one type, or ``"*"`` for all of them.

        A listener that raises is logged and contained. Returns a subscription whose
        ``unsubscribe()`` (or call) removes the listener.
        """
        if not callable(listener):
            raise ArgumentTypeError(
                f"on() needs a callable listener, got {type(listener).__name__}"
            )
        self._listeners.setdefault(event_type, []).append(listener)
        return Subscription(self._listeners, event_type, listener)

    def _emit(self, event: Event) -> None:
        """Deliver an emitted event to its listeners (the type's, then ``*``)."""
        for key in (event.type, "*"):
            for listener in list(self._listeners.get(key, ())):
                try:
                    listener(event)
                except Exception:
                    delivery.logger.exception(
                        "machine %r: emit listener raised on %r; contained", self.id, event.type
                    )

    def _post_internal(self, event: Event) -> None:
        """An engine event from outside the step (a child finished): queue it, or run it now."""
        if self._status != RUNNING:
            return
        self._internal.append(event)
        if not self._processing:
            self._run(Event("xstate.child"), self._settle_queued)

    def _spawn(self, src: str, actor_id: str | None, input: Any, path: str) -> None:
        services.spawn(self, src, actor_id, input, path)

    def _stop_child(self, actor_id: str) -> None:
        services.stop_child(self, actor_id)

    def send_to(self, actor_id: str, event_or_type: Any, /, **payload: Any) -> None:
        """Send an event to a running child actor (``"#_parent"``: to the parent machine).

        An unknown or stopped actor id is logged and ignored, as XState ignores sends to a
        child that is gone.
        """
        if actor_id == "#_parent" and self.parent is not None:
            self.parent._send(to_event(event_or_type, payload), False)
            return
        actor = self.children.get(actor_id)
        if actor is None:
            delivery.logger.warning("machine %r: no running actor %r", self.id, actor_id)
            return
        actor.send(event_or_type, **payload)

    def pending_timers(self) -> list[Timer]:
        """The armed ``after`` timers, earliest first."""
        return timers.pending_timers(self)

    def get_snapshot(self) -> str:
        """The machine at rest as a JSON string (see :mod:`xsm_celery.engine.snapshot`).

        Raises:
            SnapshotError: the context holds a value JSON cannot encode.
            ContextValidationError: the context is nested deeper than ``MAX_CONTEXT_DEPTH``.
        """
        check_context_depth(self.id, self._context)
        return dump(self)

    def snapshot(self) -> dict[str, Any]:
        """The snapshot as a dict; the context inside is the live one, not a copy.

        Raises:
            ContextValidationError: the context is nested deeper than ``MAX_CONTEXT_DEPTH``.
        """
        check_context_depth(self.id, self._context)
        return snapshot_dict(self)

    def get_persisted_snapshot(self) -> dict[str, Any]:
        """The snapshot as a JSON-safe dict sharing nothing with the machine (0.11.0, XState).

        Raises:
            SnapshotError: the context holds a value JSON cannot encode.
        """
        return persisted_snapshot(self)

    @classmethod
    def from_snapshot(
        cls: type[CoreT],
        snapshot: str | bytes | Mapping[str, Any],
        machine: Machine,
        clock: Clock | None = None,
        *,
        verify_machine_hash: bool = True,
        expected_machine_hash: str | None = None,
        restart_services: bool = False,
        plugins: Iterable[Any] = (),
        max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    ) -> CoreT:
        """Rebuild a running interpreter from :meth:`get_snapshot`, in this or another process.

        Entry actions do not run again; pending ``after`` timers are re-armed at their
        original wall-clock due time (firing on the next tick if overdue). Callback actors
        and async services are not restored unless ``restart_services`` is set.

        Args:
            snapshot: The JSON string (or its parsed dict).
            machine: The same chart; a changed structure is refused.
            clock: Clock of the restored interpreter (defaults to a ``WallClock``).
            verify_machine_hash: False restores across a structure change.
            expected_machine_hash: Also accept snapshots taken with this older hash.
            restart_services: Start the invocations of the active states again.
            plugins: Plugins to attach before anything runs (global ones are attached too).
            max_bytes: Size cap, checked before parsing.

        Raises:
            SnapshotTooLargeError: over ``max_bytes``.
            SnapshotCorruptError: not JSON, a missing or ill-typed field, unknown states.
            SnapshotMismatchError: another machine, or a changed structure.
            ContextValidationError: its context is nested deeper than ``MAX_CONTEXT_DEPTH``.
        """
        core = cls.__new__(cls)
        try:
            restore(
                core,
                snapshot,
                machine,
                clock,
                verify_machine_hash=verify_machine_hash,
                expected_machine_hash=expected_machine_hash,
                plugins=plugins,
                max_bytes=max_bytes,
            )
        except RecursionError:
            raise SnapshotCorruptError(
                f"snapshot of machine {machine.id!r} is nested too deep to parse; it is not "
                "one this engine wrote"
            ) from None
        check_context_depth(machine.id, core._context)
        if restart_services and core._status == RUNNING:
            core._pending_invokes = [n for n in machine.nodes if n.invoke and n in core._config]
            core._run(Event(_INIT), core._settle_queued)
        return core

    def _clock_next_due(self) -> float | None:
        if self._processing or self._status != RUNNING:
            return None
        heap = self._timer_heap
        if not heap:
            return None
        if heap[0][2].cancelled:
            return timers.next_due(self)
        return heap[0][0]

    def _clock_fire(self, now_ms: float) -> None:
        delivery.fire_due(self, now_ms, most=1)

    def _clock_drain(self) -> bool:
        return delivery.drain_mailbox(self)

    def _timers_armed(self) -> None:
        """Driver hook: the async interpreter schedules a wake-up for its next timer."""

    def _wake(self) -> None:
        """Driver hook: the async interpreter schedules a mailbox drain on its loop."""

    def _start_async_action(self, action: ActionDef, awaitable: Any, event: Event) -> None:
        """Driver hook: an action returned an awaitable; only the async interpreter runs it."""
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise AsyncServiceError(
            f"action {action.type!r} is async; SyncInterpreter runs sync actions only, use "
            "the async Interpreter"
        )

    def _start_awaitable(self, inv: InvokeDef, node: StateNode, result: Any) -> None:
        """Driver hook: a service returned an awaitable; only the async interpreter runs it."""
        if inspect.iscoroutine(result):
            result.close()
        services.service_failed(
            self,
            inv,
            AsyncServiceError(
                f"service {inv.src!r} is async; SyncInterpreter runs sync services only, "
                "use the async Interpreter"
            ),
        )
