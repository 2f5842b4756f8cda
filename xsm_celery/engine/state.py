"""An interpreter's fields, declared once, and the read-only views callers use.

:class:`StateView` is the one place the interpreter's state is declared. The step loop in
:mod:`xsm_celery.engine.runtime` sets these fields; the phase functions (selection, actions,
timers, services, delivery, snapshots) read and update them through the interpreter they are
given, so no module re-declares another's fields.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.errors import ArgumentTypeError, StateNotFoundError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.invoke import ActorRef
    from xsm_celery.engine.machine import Machine
    from xsm_celery.engine.runtime import StepResult
    from xsm_celery.engine.timers import Timer

__all__ = ["DONE", "NOT_STARTED", "RUNNING", "STOPPED", "StateView", "state_value"]

NOT_STARTED = "not_started"
RUNNING = "running"
DONE = "done"
STOPPED = "stopped"


def state_value(node: StateNode, config: frozenset[StateNode]) -> Any:
    """XState's ``value`` below ``node``: a key for an atomic child, a dict deeper down."""
    if node.type == "parallel":
        return {c.key: state_value(c, config) if c.children else c.key for c in node.children}
    for child in node.children:
        if child in config:
            return {child.key: state_value(child, config)} if child.children else child.key
    return {}


class StateView:
    """The interpreter's fields and what callers read from them; the core keeps them current."""

    # Slots, not an instance dict: the run loop reads these fields a dozen times per send(),
    # and past 30 fields CPython stops sharing an instance dict's keys, which makes every
    # one of those reads a hashed lookup (measured: +10% per toggle send()).
    __slots__ = (
        "_actor_id",
        "_actors",
        "_cache",
        "_config",
        "_context",
        "_delayed",
        "_history",
        "_internal",
        "_invoked_as",
        "_leaves",
        "_listeners",
        "_mailbox",
        "_mailbox_lock",
        "_pending_invokes",
        "_plugins",
        "_processing",
        "_queue",
        "_result",
        "_status",
        "_steps",
        "_timer_heap",
        "_timer_seq",
        "_timers_by_state",
        "_validator",
        "children",
        "clock",
        "input",
        "last_error",
        "machine",
        "output",
        "parent",
        "store_key",
    )

    machine: Machine
    clock: Clock
    _context: dict[str, Any]
    #: Every active state node, ancestors included, and the active leaves in document order.
    _config: frozenset[StateNode]
    _leaves: tuple[StateNode, ...]
    _status: str
    _plugins: list[Any]
    #: Events sent from inside a step (by an action), run once the step has settled.
    _queue: deque[Event]
    #: Engine events raised by a step (``done.state``, a service's result), run next.
    _internal: deque[Event]
    #: States entered in this step whose invocations start once it has settled.
    _pending_invokes: list[StateNode]
    #: True while a step runs: a ``send()`` then queues instead of re-entering.
    _processing: bool
    _timer_heap: list[tuple[float, int, Timer]]
    _timers_by_state: dict[StateNode, list[Timer]]
    _timer_seq: itertools.count[int]
    #: Delayed events (``raise`` / ``sendTo`` with a delay), in the heap too.
    _delayed: list[Timer]
    #: ``emit`` listeners by event type (``*``: every emitted event).
    _listeners: dict[str, list[Callable[[Event], Any]]]
    #: The interpreter that invoked or spawned this one as a child, if any, the actor id it
    #: knows this one by, and the invocation that started it.
    parent: Any
    _actor_id: str | None
    _invoked_as: Any
    _actors: dict[StateNode, list[ActorRef]]
    children: dict[str, ActorRef]
    #: Events posted from other threads, delivered on the owner's next step.
    _mailbox: deque[Event]
    _mailbox_lock: threading.Lock
    _cache: dict[Any, Any]
    #: The record of the current (or last) run; reset at the start of each.
    _result: StepResult
    #: The machine's context validator (None: no validation), looked up once.
    _validator: Callable[[dict[str, Any]], Any] | None
    #: What each history state remembers (recorded when its parent exits).
    _history: dict[StateNode, tuple[StateNode, ...]]
    #: Microsteps taken for the event being processed (the runaway check).
    _steps: int
    last_error: BaseException | None
    output: Any
    store_key: str | None
    #: The ``input`` the interpreter was created with (reaches a ``context`` callable).
    input: Any

    @property
    def id(self) -> str:
        """The machine's id; for a child machine, the actor id its parent knows it by."""
        return self._actor_id or self.machine.root.id

    @property
    def status(self) -> str:
        """``not_started``, ``running``, ``done`` (top-level final reached) or ``stopped``."""
        return self._status

    @property
    def context(self) -> dict[str, Any]:
        """The machine's context: a plain dict that actions mutate in place."""
        return self._context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        if not isinstance(value, dict):
            raise ArgumentTypeError(f"context must be a dict, got {type(value).__name__}")
        self._context = value

    @property
    def value(self) -> Any:
        """The active state as XState spells it: ``"idle"`` or ``{"p": {"r1": "a"}}``."""
        root = self.machine.root
        if not self._config:
            return {}
        if root.type == "parallel":
            return state_value(root, self._config)
        leaves = self._leaves
        if len(leaves) == 1 and leaves[0].parent is root:
            return leaves[0].key
        return state_value(root, self._config)

    @property
    def current_state_ids(self) -> set[str]:
        """Full dotted ids of the active leaves, e.g. ``{"job.retrying"}``."""
        return {s.id for s in self._leaves}

    @property
    def configuration(self) -> frozenset[StateNode]:
        """Every active state node, ancestors included."""
        return self._config

    @property
    def active_leaves(self) -> tuple[StateNode, ...]:
        """The active leaf nodes in document order."""
        return self._leaves

    @property
    def tags(self) -> set[str]:
        """The tags of every active state."""
        tags: set[str] = set()
        for node in self._config:
            if node.tags:
                tags |= node.tags
        return tags

    @property
    def is_running(self) -> bool:
        """Whether the interpreter is between ``start()`` and ``stop()`` (or being done)."""
        return self._status == RUNNING

    def get_meta(self) -> dict[str, Any]:
        """The ``meta`` of every active state that has one, by state id."""
        return {node.id: node.meta for node in self._config if node.meta}

    def has_tag(self, tag: str) -> bool:
        """Whether any active state carries ``tag``."""
        return any(tag in node.tags for node in self._config)

    def matches(self, state: str | Mapping[str, Any]) -> bool:
        """Whether a state is active, in every spelling 0.11.0 and XState accept.

        A full id (``job.done``), a path below the root (``done``, ``p.r1.a``), ``#custom``
        or ``#custom.child``, a trailing part of an id (``r1.a``, 0.11.0's partial path), or a
        partial ``value`` (``{"p": {"r1": "a"}}``, XState's object form). An ancestor
        matches when any descendant is active.

        Raises:
            StateNotFoundError: the chart has no such state (a typo never reads as False).
        """
        if isinstance(state, Mapping):
            return self._matches_value(self.machine.root, state)
        node = self.machine.find_state(state)
        if node is not None:
            return node in self._config
        suffix = "." + state.lstrip("#")
        candidates = [n for n in self.machine.nodes if n.id.endswith(suffix)]
        if not candidates:
            raise StateNotFoundError(state, reference_id=self.machine.id)
        return any(n in self._config for n in candidates)

    def _matches_value(self, node: StateNode, pattern: Any) -> bool:
        if isinstance(pattern, str):
            child = node.states.get(pattern)
            if child is None:
                raise StateNotFoundError(pattern, reference_id=node.id)
            return child in self._config
        if not isinstance(pattern, Mapping):
            raise ArgumentTypeError(
                f"matches() takes a state id or a value dict, got {pattern!r:.60}"
            )
        for key, sub in pattern.items():
            child = node.states.get(key)
            if child is None:
                raise StateNotFoundError(str(key), reference_id=node.id)
            if child not in self._config or not self._matches_value(child, sub):
                return False
        return True

    def wall_now(self) -> float:
        """Wall-clock time of this interpreter's clock, in epoch seconds."""
        return self.clock.wall_now()

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(id={self.id!r}, status={self._status!r}, value={self.value!r})"
