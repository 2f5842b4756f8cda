"""The chart model: state nodes, transitions, actions, guards, timers and invocations.

These are plain records built once by :mod:`xsm_celery.engine.build` and never changed
afterwards; the interpreter only reads them. Everything the step needs per event (the
candidate transitions of a leaf with its ancestors', each transition's domain and entry set)
is precomputed here so that an event costs dictionary look-ups rather than tree walks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ActionDef",
    "AfterDef",
    "GuardDef",
    "InvokeDef",
    "StateNode",
    "Transition",
]

#: The state types a chart may declare.
STATE_TYPES = ("atomic", "compound", "parallel", "final", "history")

#: What a history state remembers: the active children, or every active leaf below.
HISTORY_KINDS = ("shallow", "deep")


class ActionDef:
    """One action reference: a name, optional params and the resolved implementation.

    The action callable receives this object as its fourth argument, so ``params`` is how
    one implementation serves several call sites.
    """

    __slots__ = ("fn", "params", "path", "type")

    def __init__(
        self, type: str, params: Any = None, fn: Callable[..., Any] | None = None, path: str = ""
    ) -> None:
        self.type = type
        self.params = params
        self.fn = fn
        self.path = path

    def __repr__(self) -> str:
        params = f", params={self.params!r}" if self.params is not None else ""
        return f"ActionDef(type={self.type!r}{params})"


class GuardDef:
    """A guard reference; ``takes_params`` says whether the callable wants a third argument.

    A combinator (``and``, ``or``, ``not``) has its operands in ``guards``; ``stateIn`` has
    the state it asks about in ``state_ref`` (resolved to ``state``). ``combinator`` names
    which of these it is, None for a named guard of the logic.
    """

    __slots__ = (
        "combinator",
        "fn",
        "guards",
        "params",
        "path",
        "state",
        "state_ref",
        "takes_params",
        "type",
    )

    def __init__(
        self,
        type: str,
        params: Any = None,
        fn: Callable[..., Any] | None = None,
        path: str = "",
        takes_params: bool = False,
    ) -> None:
        self.type = type
        self.params = params
        self.fn = fn
        self.path = path
        self.takes_params = takes_params
        self.combinator: str | None = None
        self.guards: tuple[GuardDef, ...] = ()
        self.state_ref: str | None = None
        self.state: StateNode | None = None

    def __repr__(self) -> str:
        return f"GuardDef(type={self.type!r})"


class Transition:
    """One candidate transition of a state for one event (or eventless, or a timer).

    ``domain`` is the state whose active descendants the transition exits; it is None for a
    targetless transition, which runs its actions and changes no state. ``entry`` lists, in
    document order, every state the transition enters (targets, their default descendants and
    the other regions of any parallel state on the way).
    """

    __slots__ = (
        "actions",
        "description",
        "domain",
        "entry",
        "event",
        "guard",
        "history",
        "meta",
        "path",
        "reenter",
        "source",
        "target_ids",
        "targets",
    )

    def __init__(self, source: StateNode, event: str, path: str) -> None:
        self.source = source
        self.event = event
        self.path = path
        self.target_ids: tuple[str, ...] = ()
        self.targets: tuple[StateNode, ...] = ()
        self.guard: GuardDef | None = None
        self.actions: tuple[ActionDef, ...] = ()
        self.reenter = False
        #: Whether a target is a history state, so the entry set is found per step.
        self.history = False
        self.domain: StateNode | None = None
        self.entry: tuple[StateNode, ...] = ()
        self.meta: Mapping[str, Any] = {}
        self.description: str | None = None

    @property
    def target(self) -> tuple[StateNode, ...]:
        """The resolved target nodes (empty for a targetless transition)."""
        return self.targets

    def __repr__(self) -> str:
        targets = ",".join(t.id for t in self.targets) or "-"
        return f"Transition({self.source.id} --{self.event or '(always)'}--> {targets})"


class AfterDef:
    """An ``after`` entry: a fixed delay or a named one, and its candidate transitions."""

    __slots__ = ("delay_fn", "delay_ms", "event_type", "key", "path", "transitions")

    def __init__(self, key: str, event_type: str, path: str) -> None:
        self.key = key
        self.event_type = event_type
        self.path = path
        self.delay_ms: float | None = None
        self.delay_fn: Any = None
        self.transitions: tuple[Transition, ...] = ()

    @property
    def delay_name(self) -> str | None:
        """The logic name of a named delay, or None for a literal number of milliseconds."""
        return None if self.delay_ms is not None else self.key


class InvokeDef:
    """An ``invoke`` entry: the service name, its id, and its onDone/onError transitions."""

    __slots__ = (
        "done_type",
        "error_type",
        "id",
        "impl",
        "input",
        "on_done",
        "on_error",
        "path",
        "source",
        "src",
    )

    def __init__(self, source: StateNode, src: str, invoke_id: str, path: str) -> None:
        self.source = source
        self.src = src
        self.id = invoke_id
        self.path = path
        self.input: Any = None
        self.impl: Any = None
        self.on_done: tuple[Transition, ...] = ()
        self.on_error: tuple[Transition, ...] = ()
        self.done_type = f"done.invoke.{invoke_id}"
        self.error_type = f"error.platform.{invoke_id}"

    def __repr__(self) -> str:
        return f"InvokeDef(id={self.id!r}, src={self.src!r})"


class StateNode:
    """A state of the chart, with everything the step precomputes about it.

    ``id`` is the full dotted id (``job.retrying``); ``order`` is the position in document
    order, which fixes entry order (ascending) and exit order (descending).
    """

    __slots__ = (
        "after",
        "always",
        "ancestor_set",
        "ancestors",
        "children",
        "config",
        "custom_id",
        "depth",
        "description",
        "entry",
        "eventless",
        "exit",
        "handlers",
        "has_wildcards",
        "history",
        "history_children",
        "history_default",
        "history_target_ids",
        "id",
        "initial",
        "invoke",
        "key",
        "meta",
        "on",
        "order",
        "output",
        "own_handlers",
        "parent",
        "path",
        "states",
        "tags",
        "type",
    )

    def __init__(self, key: str, state_id: str, parent: StateNode | None, path: str) -> None:
        self.key = key
        self.id = state_id
        self.parent = parent
        self.path = path
        self.type = "atomic"
        self.config: Mapping[str, Any] = {}
        self.custom_id: str | None = None
        self.children: tuple[StateNode, ...] = ()
        self.states: Mapping[str, StateNode] = {}
        self.initial: StateNode | None = None
        self.order = 0
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.ancestors: tuple[StateNode, ...] = ()
        self.ancestor_set: frozenset[StateNode] = frozenset()
        self.entry: tuple[ActionDef, ...] = ()
        self.exit: tuple[ActionDef, ...] = ()
        self.on: Mapping[str, tuple[Transition, ...]] = {}
        self.always: tuple[Transition, ...] = ()
        self.after: tuple[AfterDef, ...] = ()
        self.invoke: tuple[InvokeDef, ...] = ()
        self.tags: frozenset[str] = frozenset()
        self.meta: Mapping[str, Any] = {}
        self.description: str | None = None
        self.output: Any = None
        self.handlers: dict[str, tuple[Transition, ...]] = {}
        self.eventless: tuple[Transition, ...] = ()
        #: This state's own transitions by exact event type (on, after, invoke results).
        self.own_handlers: dict[str, tuple[Transition, ...]] = {}
        #: Whether this leaf or an ancestor has a ``*`` or ``prefix.*`` descriptor, so
        #: ``handlers`` is filled per event type on first use.
        self.has_wildcards = False
        #: ``shallow`` or ``deep`` for a history state, else None.
        self.history: str | None = None
        #: The history states among this state's children (not in ``children``: a history
        #: state is a pointer, never active).
        self.history_children: tuple[StateNode, ...] = ()
        self.history_target_ids: tuple[str, ...] = ()
        #: A history state's default targets, entered when nothing is remembered yet.
        self.history_default: tuple[StateNode, ...] = ()

    @property
    def is_leaf(self) -> bool:
        """Atomic and final states are leaves: they have no children to enter."""
        return not self.children

    @property
    def is_final(self) -> bool:
        """Whether this is a ``final`` state."""
        return self.type == "final"

    def is_descendant_of(self, other: StateNode) -> bool:
        """Whether ``other`` is a proper ancestor of this state."""
        return other in self.ancestor_set

    def __repr__(self) -> str:
        return f"StateNode(id={self.id!r}, type={self.type!r})"
