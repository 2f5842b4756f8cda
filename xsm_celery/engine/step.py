"""The microstep as data: which states a set of transitions exits and enters.

:func:`plan` is pure: given the active configuration and the transitions selected for an
event it returns a :class:`Plan`, which the interpreter carries out (exit actions, transition
actions, entry actions, timers, invocations). Because it is pure, plans are cached per
machine, keyed by configuration and transitions, so a machine that cycles through a handful of
configurations computes each step once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.engine.targets import default_entry, history_entry
from xsm_celery.errors import ImplementationMissingError

__all__ = [
    "Plan",
    "exit_set",
    "initial_plan",
    "leaves_of",
    "missing_implementation",
    "plan",
    "record_history",
    "remove_conflicts",
]

#: Bound on cached plans per machine; past it plans are still computed, just not kept.
CACHE_LIMIT = 4096


class Plan(NamedTuple):
    """One microstep: states to exit (exit order), to enter (entry order), and the result."""

    exits: tuple[StateNode, ...]
    entries: tuple[StateNode, ...]
    config: frozenset[StateNode]
    leaves: tuple[StateNode, ...]


def _order(node: StateNode) -> int:
    return node.order


def leaves_of(config: Iterable[StateNode]) -> tuple[StateNode, ...]:
    """The active leaves of a configuration, in document order."""
    return tuple(sorted((s for s in config if not s.children), key=_order))


def exit_set(config: frozenset[StateNode], trans: Transition) -> set[StateNode]:
    """The active states a transition exits: every active proper descendant of its domain."""
    domain = trans.domain
    if domain is None:
        return set()
    return {s for s in config if domain in s.ancestor_set}


def plan(
    config: frozenset[StateNode],
    transitions: Sequence[Transition],
    cache: dict[Any, Plan],
    remembered: Mapping[StateNode, tuple[StateNode, ...]] | None = None,
    *,
    require_implementations: bool = True,
) -> Plan:
    """The microstep for ``transitions`` taken together from ``config``.

    Cached by configuration and transitions, except a step into a history state: what it
    enters depends on ``remembered`` (history state -> the states it recorded). The pure
    transition functions, which run no action, pass ``require_implementations=False`` and a
    cache of their own, so an unchecked plan never reaches an interpreter.
    """
    key = (config, tuple(transitions))
    found = cache.get(key)
    if found is not None:
        return found
    exits: set[StateNode] = set()
    entries: set[StateNode] = set()
    historic = False
    for trans in transitions:
        exits |= exit_set(config, trans)
        if trans.history:
            historic = True
            entries.update(history_entry(trans, remembered or {}))
        else:
            entries.update(trans.entry)
    missing = missing_implementation(exits, entries, transitions)
    if missing is not None and require_implementations:
        raise missing
    new_config = frozenset((config - exits) | entries)
    result = Plan(
        tuple(sorted(exits, key=_order, reverse=True)),
        tuple(sorted(entries, key=_order)),
        new_config,
        leaves_of(new_config),
    )
    if not historic and len(cache) < CACHE_LIMIT:
        cache[key] = result
    return result


def record_history(
    exiting: StateNode,
    config: frozenset[StateNode],
    remembered: dict[StateNode, tuple[StateNode, ...]],
) -> None:
    """Record, for each history child of a state about to exit, what it must restore.

    Shallow history keeps the active children, deep history every active leaf below the
    state (in document order). SCXML records on exit, before any exit action runs.
    """
    for hist in exiting.history_children:
        if hist.history == "deep":
            kept = tuple(s for s in leaves_of(config) if exiting in s.ancestor_set)
        else:
            kept = tuple(sorted((c for c in exiting.children if c in config), key=_order))
        remembered[hist] = kept


def missing_implementation(
    exits: Iterable[StateNode], entries: Iterable[StateNode], transitions: Iterable[Transition]
) -> ImplementationMissingError | None:
    """The first action, service or named delay a step would need but the logic lacks.

    Checked when a step is planned, before anything runs, so a chart with incomplete logic
    fails the ``send()`` that needs the missing piece and keeps its configuration.
    """
    for node in exits:
        for action in node.exit:
            if action.fn is None:
                return ImplementationMissingError("action", action.type, path=action.path)
    for trans in transitions:
        for action in trans.actions:
            if action.fn is None:
                return ImplementationMissingError("action", action.type, path=action.path)
    for node in sorted(entries, key=_order):
        for action in node.entry:
            if action.fn is None:
                return ImplementationMissingError("action", action.type, path=action.path)
        for after in node.after:
            if after.delay_ms is None and after.delay_fn is None:
                return ImplementationMissingError("delay", after.key, path=after.path)
        for inv in node.invoke:
            if inv.impl is None:
                return ImplementationMissingError("service", inv.src, path=inv.path)
    return None


def initial_plan(root: StateNode, *, require_implementations: bool = True) -> Plan:
    """The plan of ``start()``: enter the root and its default descendants.

    Raises:
        ImplementationMissingError: the initial states need an action, service or named
            delay the logic lacks.
    """
    into: set[StateNode] = set()
    default_entry(root, into)
    missing = missing_implementation((), into, ())
    if missing is not None and require_implementations:
        raise missing
    config = frozenset(into)
    return Plan((), tuple(sorted(into, key=_order)), config, leaves_of(config))


def remove_conflicts(selected: list[Transition], config: frozenset[StateNode]) -> list[Transition]:
    """Drop transitions that would exit the same states as an earlier one.

    Between two conflicting transitions the one from the deeper source wins; otherwise the
    earlier one (document order of the leaves) does. Targetless transitions never conflict.
    This is SCXML's rule, and it is what makes parallel regions deterministic.
    """
    kept: list[Transition] = []
    kept_exits: list[set[StateNode]] = []
    for t1 in selected:
        exits1 = exit_set(config, t1)
        preempted = False
        drop: list[int] = []
        for index, t2 in enumerate(kept):
            if exits1 & kept_exits[index]:
                if t2.source in t1.source.ancestor_set:
                    drop.append(index)
                else:
                    preempted = True
                    break
        if preempted:
            continue
        for index in reversed(drop):
            del kept[index]
            del kept_exits[index]
        kept.append(t1)
        kept_exits.append(exits1)
    return kept
