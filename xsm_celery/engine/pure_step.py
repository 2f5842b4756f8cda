"""Pure transitions: the next snapshot of a machine for an event, and the actions it would run.

Nothing runs: no action, no service, no timer, no clock. The step is the interpreter's own
(:func:`~xsm_celery.engine.selection.select_transitions`, :func:`~xsm_celery.engine.step.plan`,
history recording, eventless transitions, done events, the composite built-ins expanded by
:func:`~xsm_celery.engine.builtins.expand`), so the answer is the one ``send()`` would give.
That makes it the basis of a dry run ("what would this event do to instance 42?") and of the
chart tools. As in XState v5, what changes the snapshot itself is applied: ``assign``
updates the context copy and a ``raise`` without a delay is processed in the same step. Every
other action is returned in order, together with what the caller would have to do for timers
and services: a delayed ``xstate.raise`` for each ``after`` timer armed (its ``id`` is the
timer's event type), an ``xstate.cancel`` for each one its state's exit drops, and
``xstate.spawnChild`` / ``xstate.stopChild`` for each invocation started or stopped.

Guards are evaluated (they decide the transition); a guard the logic lacks raises
:class:`ImplementationMissingError`. Actions, services and delays need no implementation.
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.builtins import builtin_action, canonical_builtin, expand, is_composite
from xsm_celery.engine.chart import ActionDef, StateNode, Transition
from xsm_celery.engine.events import EngineEvent, Event, done_state_type, to_event
from xsm_celery.engine.runtime import Core, initial_context
from xsm_celery.engine.selection import select_eventless, select_transitions
from xsm_celery.engine.snapshot import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    configuration,
    parse,
    remembered_history,
)
from xsm_celery.engine.snapshot_v011 import normalise
from xsm_celery.engine.state import state_value
from xsm_celery.engine.step import Plan, initial_plan, leaves_of, plan, record_history
from xsm_celery.errors import ArgumentTypeError, RunawayChainError, SnapshotCorruptError

if TYPE_CHECKING:
    from xsm_celery.engine.machine import Machine

__all__ = [
    "PureSnapshot",
    "get_initial_snapshot",
    "get_next_snapshot",
    "initial_transition",
    "pure_transition",
]

logger = logging.getLogger("xsm_celery.engine")

#: Key, in a machine's step cache, of the plans computed without the implementation check:
#: kept apart so an unchecked plan never reaches an interpreter, and gone with the machine.
_UNCHECKED_PLANS = object()


class PureSnapshot:
    """A machine's state as the pure functions compute it: a value, never a running machine.

    ``status`` is ``"active"`` or ``"done"`` (XState v5's spelling); ``state_ids`` are the
    active leaves and ``configuration`` every active state; ``history`` maps each history
    state id to what it remembers. ``context`` is a copy owned by this snapshot.
    """

    __slots__ = ("_config", "_history", "context", "machine", "output", "status")

    def __init__(
        self,
        machine: Machine,
        config: frozenset[StateNode],
        context: dict[str, Any],
        *,
        status: str = "active",
        output: Any = None,
        history: Mapping[StateNode, tuple[StateNode, ...]] | None = None,
    ) -> None:
        self.machine = machine
        self._config = config
        self.context = context
        self.status = status
        self.output = output
        self._history = dict(history or {})

    @property
    def state_ids(self) -> frozenset[str]:
        """Full ids of the active leaves."""
        return frozenset(s.id for s in self._config if not s.children)

    @property
    def configuration(self) -> frozenset[str]:
        """Full ids of every active state, ancestors included."""
        return frozenset(s.id for s in self._config)

    @property
    def value(self) -> Any:
        """The active state as XState spells it: ``"idle"`` or ``{"p": {"r1": "a"}}``."""
        return state_value(self.machine.root, self._config) if self._config else {}

    @property
    def history(self) -> dict[str, list[str]]:
        """History state id to the ids it remembers."""
        return {h.id: [s.id for s in kept] for h, kept in self._history.items()}

    def matches(self, state: str) -> bool:
        """Whether ``state`` (a full id, a path below the root or ``#id``) is active."""
        node = self.machine.find_state(state)
        return node is not None and node in self._config

    def __repr__(self) -> str:
        return f"PureSnapshot(states={sorted(self.state_ids)}, status={self.status!r})"


def initial_transition(
    machine: Machine, *, input: Any = None
) -> tuple[PureSnapshot, list[ActionDef]]:
    """The initial snapshot, and the entry actions ``start()`` would run (XState v5).

    Raises:
        RunawayChainError: the initial ``always`` chain never settles.
        ImplementationMissingError: a guard on the way is not in the logic.
    """
    step = _Step(machine, frozenset(), initial_context(machine, input), {})
    start = initial_plan(machine.root, require_implementations=False)
    init = Event("xstate.init")
    step.apply(start, (Transition(machine.root, "xstate.init", ""),), init)
    step.settle(init)
    step.drain()
    return step.snapshot(), step.actions


def pure_transition(
    machine: Machine, snapshot: Any, event: Any
) -> tuple[PureSnapshot, list[ActionDef]]:
    """The snapshot after ``event``, and the actions it would run (XState v5's ``transition``).

    Args:
        machine: The machine the snapshot is of.
        snapshot: A :class:`PureSnapshot`, an interpreter (its state is copied, it is not
            touched) or a persisted snapshot (JSON text or dict, this engine's or 0.11.0's).
        event: What ``send()`` accepts: a type, an :class:`Event` or a ``{"type": ...}`` dict.

    Raises:
        InvalidEventError: ``event`` is not an event.
        RunawayChainError: the event's chain never settles.
        ImplementationMissingError: a guard the step evaluates is not in the logic.
        SnapshotError: a persisted snapshot is corrupt or of another machine.
    """
    step = _Step(machine, *_state_of(machine, snapshot))
    admitted = to_event(event, {})
    if step.status == "active":
        step.process(admitted)
        step.drain()
    return step.snapshot(), step.actions


def get_initial_snapshot(machine: Machine, *, input: Any = None) -> PureSnapshot:
    """The initial snapshot (XState v5's ``getInitialSnapshot``), the actions dropped."""
    return initial_transition(machine, input=input)[0]


def get_next_snapshot(machine: Machine, snapshot: Any, event: Any) -> PureSnapshot:
    """The snapshot after ``event`` (XState v5's ``getNextSnapshot``), the actions dropped.

    ``snapshot`` takes what :func:`pure_transition` takes.
    """
    return pure_transition(machine, snapshot, event)[0]


def _state_of(
    machine: Machine, snapshot: Any
) -> tuple[frozenset[StateNode], dict[str, Any], dict[StateNode, tuple[StateNode, ...]], str]:
    """Configuration, a context copy, history and status of whatever ``snapshot`` is."""
    if isinstance(snapshot, PureSnapshot):
        return (
            snapshot._config,
            copy.deepcopy(snapshot.context),
            dict(snapshot._history),
            snapshot.status,
        )
    if isinstance(snapshot, Core):
        status = "done" if snapshot.status == "done" else "active"
        return (
            snapshot.configuration,
            copy.deepcopy(snapshot.context),
            dict(snapshot._history),
            status,
        )
    if not isinstance(snapshot, (str, bytes, Mapping)):
        raise ArgumentTypeError(
            "snapshot must be a PureSnapshot, an interpreter or a persisted snapshot, got "
            f"{type(snapshot).__name__}"
        )
    data = normalise(parse(snapshot, DEFAULT_MAX_SNAPSHOT_BYTES), machine)
    if data.get("machine_id") != machine.id:
        raise SnapshotCorruptError(
            f"snapshot is of machine {data.get('machine_id')!r}, not {machine.id!r}"
        )
    context = data.get("context")
    state_ids = data.get("state_ids")
    if not isinstance(context, dict) or not isinstance(state_ids, list) or not state_ids:
        raise SnapshotCorruptError("snapshot needs a 'context' object and active 'state_ids'")
    history = data.get("history") or {}
    return (
        configuration(machine, state_ids),
        copy.deepcopy(context),
        remembered_history(machine, history) if history else {},
        "done" if data.get("status") == "done" else "active",
    )


class _Step:
    """One pure macrostep: the interpreter's loop over a copy of the state, recording actions.

    It stands in for the interpreter where the engine's shared functions (selection, guards,
    the composite built-ins) read one: ``machine``, ``_config``, ``_leaves``, ``_context``,
    ``_plugins`` (none) and ``id``.
    """

    def __init__(
        self,
        machine: Machine,
        config: frozenset[StateNode],
        context: dict[str, Any],
        history: dict[StateNode, tuple[StateNode, ...]],
        status: str = "active",
    ) -> None:
        self.machine = machine
        self.id = machine.id
        self._config = config
        self._leaves = leaves_of(config)
        self._context = context
        self._history = history
        self._plugins: list[Any] = []
        self._internal: deque[Event] = deque()
        self._steps = 0
        self.status = status
        self.output: Any = None
        self.actions: list[ActionDef] = []
        cache = machine.step_cache.get(_UNCHECKED_PLANS)
        if cache is None:
            cache = machine.step_cache[_UNCHECKED_PLANS] = {}
        self._cache: dict[Any, Plan] = cache

    @property
    def context(self) -> dict[str, Any]:
        """The context being computed (what an ``enqueueActions`` callback's ``self`` reads)."""
        return self._context

    def snapshot(self) -> PureSnapshot:
        return PureSnapshot(
            self.machine,
            self._config,
            self._context,
            status=self.status,
            output=self.output,
            history=self._history,
        )

    def process(self, event: Event) -> None:
        selected = select_transitions(self, event)  # type: ignore[arg-type]
        if selected:
            self.microstep(selected, event)
        self.settle(event)

    def settle(self, event: Event) -> None:
        while self.status == "active":
            selected = select_eventless(self, event)  # type: ignore[arg-type]
            if not selected:
                return
            self.microstep(selected, event)

    def drain(self) -> None:
        while self._internal and self.status == "active":
            self.process(self._internal.popleft())

    def microstep(self, transitions: tuple[Transition, ...], event: Event) -> None:
        self._steps += 1
        limit = self.machine.chain_limit
        if self._steps > limit:
            raise RunawayChainError(
                f"machine {self.id!r}: more than {limit} microsteps for event {event.type!r} "
                "in a pure transition; an 'always' cycle or raise loop never settles",
                limit=limit,
            )
        step = plan(
            self._config, transitions, self._cache, self._history, require_implementations=False
        )
        self.apply(step, transitions, event)

    def apply(self, step: Plan, transitions: tuple[Transition, ...], event: Event) -> None:
        before = self._config
        for node in step.exits:
            if node.history_children:
                record_history(node, before, self._history)
            self.run(node.exit, event)
            for after in node.after:
                self.actions.append(_described("cancel", {"sendId": after.event_type}, after.path))
            for inv in node.invoke:
                self.actions.append(_described("stopChild", {"id": inv.id}, inv.path))
        for trans in transitions:
            self.run(trans.actions, event)
        self._config = step.config
        self._leaves = step.leaves
        finals = []
        for node in step.entries:
            self.run(node.entry, event)
            for after in node.after:
                delay = after.delay_ms if after.delay_ms is not None else after.key
                params = {"event": after.event_type, "delay": delay, "id": after.event_type}
                self.actions.append(_described("raise", params, after.path))
            for inv in node.invoke:
                params = {"src": inv.src, "id": inv.id, "input": inv.input}
                self.actions.append(_described("spawnChild", params, inv.path))
            if node.type == "final":
                finals.append(node)
        if finals:
            self.finals_entered(finals)

    def run(self, actions: tuple[ActionDef, ...], event: Event) -> None:
        """Apply ``assign`` and undelayed ``raise``, record the rest; composites expanded."""
        pending = deque(actions)
        expanded = 0
        while pending:
            action = pending.popleft()
            if is_composite(action):
                expanded += 1
                if expanded > self.machine.chain_limit:
                    raise RunawayChainError(
                        f"machine {self.id!r}: composite actions kept expanding in a pure "
                        "transition",
                        limit=self.machine.chain_limit,
                    )
                pending.extendleft(reversed(expand(self, self._context, event, action)))  # type: ignore[arg-type]
                continue
            canonical = canonical_builtin(action.type)
            builtin = canonical is not None and action.fn is builtin_action(canonical)
            if builtin and canonical == "assign":
                try:
                    builtin_action("assign")(self, self._context, event, action)  # type: ignore[arg-type]
                except Exception as exc:
                    logger.warning(
                        "machine %r: assign %r raised in a pure transition; rest of its list "
                        "skipped: %s",
                        self.id,
                        action.path,
                        exc,
                    )
                    return
            elif builtin and canonical == "raise" and action.params.get("delay") is None:
                builtin_action("raise")(self, self._context, event, action)  # type: ignore[arg-type]
            else:
                self.actions.append(action)

    def finals_entered(self, finals: list[StateNode]) -> None:
        """Raise ``done.state`` for completed parents and parallel states; or finish."""
        root = self.machine.root
        parents: list[StateNode] = []
        for node in finals:
            parent = node.parent
            if parent is None or parent in parents:
                continue
            if parent is root:
                self.finish(node)
                return
            parents.append(parent)
            self._internal.append(EngineEvent(done_state_type(parent.id), node.output, parent.id))
        for parent in parents:
            grand = parent.parent
            while grand is not None and grand.type == "parallel" and self._all_final(grand):
                if grand is root:
                    self.finish(finals[-1])
                    return
                self._internal.append(EngineEvent(done_state_type(grand.id), None, grand.id))
                grand = grand.parent

    def _all_final(self, node: StateNode) -> bool:
        if node.type == "parallel":
            return all(self._all_final(child) for child in node.children)
        if node.type == "compound":
            return any(c.type == "final" and c in self._config for c in node.children)
        return node.type == "final"

    def finish(self, final: StateNode) -> None:
        self.status = "done"
        self.output = final.output if final.output is not None else self.machine.root.output
        self._internal.clear()


def _described(name: str, params: dict[str, Any], path: str) -> ActionDef:
    """An action the caller would carry out for a timer or a service (no implementation)."""
    return ActionDef(f"xstate.{name}", params, None, path)
