"""Transition selection: which transitions an event (or no event) enables right now.

Each active leaf looks up its candidates (its own, then its ancestors', precomputed per leaf)
and takes the first whose guard passes. With parallel regions every leaf chooses, a shared
ancestor transition is taken once, and conflicts are resolved as SCXML resolves them.

The entry points are plain functions so code outside the step can ask the same questions the
step asks: :func:`evaluate_guard` (one guard, contained), :func:`first_enabled` (the
candidate a list would take), :func:`select_transitions` and :func:`select_eventless` (what
an interpreter would take now). A selection returns the transitions, ``None`` when no state
handles the event, or :data:`DENIED` (an empty tuple) when some state handles it but every
guard said no.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.step import remove_conflicts
from xsm_celery.engine.targets import candidates_for
from xsm_celery.errors import ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import GuardDef, StateNode, Transition
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.runtime import Core

__all__ = [
    "DENIED",
    "evaluate_guard",
    "first_enabled",
    "select_eventless",
    "select_transitions",
]

logger = logging.getLogger("xsm_celery.engine")

#: The selection of an event that some state handles but whose every guard refused it.
DENIED: tuple[Transition, ...] = ()

Selected = tuple["Transition", ...] | None


def select_transitions(core: Core, event: Event) -> Selected:
    """The transitions ``event`` enables in ``core``'s configuration (see the module doc).

    One active leaf (no parallel state active) is the common case and gets a loop of its own,
    free of the bookkeeping parallel selection needs.
    """
    leaves = core._leaves
    if len(leaves) == 1:
        leaf = leaves[0]
        candidates = leaf.handlers.get(event.type)
        if candidates is None:
            if not leaf.has_wildcards:
                return None
            candidates = candidates_for(leaf, event.type)
        for trans in candidates:
            if trans.guard is None or evaluate_guard(trans.guard, core._context, event, core):
                return (trans,)
        # Tested after the loop, off the path of an event that is taken: no candidates
        # (an unmatched wildcard leaf caches an empty tuple) is unhandled, not denied.
        return DENIED if candidates else None
    return _select_many(core, [_candidates(leaf, event.type) for leaf in leaves], event)


def _candidates(leaf: StateNode, event_type: str) -> tuple[Transition, ...] | None:
    candidates = leaf.handlers.get(event_type)
    if candidates is None and leaf.has_wildcards:
        return candidates_for(leaf, event_type)
    return candidates


def select_eventless(core: Core, event: Event) -> Selected:
    """The enabled ``always`` transitions; guards see the event that led here."""
    leaves = core._leaves
    if len(leaves) == 1:
        for trans in leaves[0].eventless:
            if trans.guard is None or evaluate_guard(trans.guard, core._context, event, core):
                return (trans,)
        return None
    selected = _select_many(core, [leaf.eventless for leaf in leaves], event)
    return selected or None


def first_enabled(
    candidates: Iterable[Transition], context: Any, event: Event, core: Core | None = None
) -> Transition | None:
    """The first candidate whose guard passes (or that has none), as the step would pick it."""
    for trans in candidates:
        if trans.guard is None or evaluate_guard(trans.guard, context, event, core):
            return trans
    return None


def _select_many(
    core: Core, per_leaf: list[tuple[Transition, ...] | None], event: Event
) -> Selected:
    """Selection across parallel regions: each leaf picks its first enabled candidate."""
    selected: list[Transition] = []
    verdicts: dict[Transition, bool] = {}
    handled = False
    ctx = core._context
    for candidates in per_leaf:
        if not candidates:
            continue
        handled = True
        for trans in candidates:
            if trans in selected:
                break
            ok = verdicts.get(trans)
            if ok is None:
                guard = trans.guard
                ok = verdicts[trans] = guard is None or evaluate_guard(guard, ctx, event, core)
            if ok:
                selected.append(trans)
                break
    if not selected:
        return DENIED if handled else None
    if len(selected) > 1:
        selected = remove_conflicts(selected, core._config)
    return tuple(selected)


def evaluate_guard(guard: GuardDef, context: Any, event: Event, core: Core | None = None) -> bool:
    """Evaluate one guard; one that raises is False, logged and reported.

    With ``core`` the plugins of that interpreter hear ``on_guard_evaluated`` (and
    ``on_guard_error``); without it the guard is only evaluated, which is how code outside a
    step asks what a guard would say (a ``stateIn`` guard is then False: there is no
    configuration to look in).

    Raises:
        ImplementationMissingError: the guard (or an operand) is not in the logic; a step
            raises it from ``send()`` before changing anything.
    """
    fn = guard.fn
    if fn is None and guard.combinator is None:
        raise ImplementationMissingError("guard", guard.type, path=guard.path)
    try:
        if guard.combinator is not None:
            result = _combined(guard, context, event, core)
        elif guard.takes_params:
            result = bool(fn(context, event, guard.params))  # type: ignore[misc]
        else:
            result = bool(fn(context, event))  # type: ignore[misc]
    except ImplementationMissingError:
        raise
    except Exception as exc:
        _guard_failed(guard, event, exc, core)
        result = False
    if core is not None and core._plugins:
        dispatch(core, core._plugins, "on_guard_evaluated", (guard.type, event, result))
    return result


def _combined(guard: GuardDef, context: Any, event: Event, core: Core | None) -> bool:
    """``and`` / ``or`` / ``not`` over operand guards, and ``stateIn`` over the configuration."""
    kind = guard.combinator
    if kind == "stateIn":
        return core is not None and guard.state in core._config
    if kind == "not":
        return not _operand(guard.guards[0], context, event, core)
    if kind == "and":
        return all(_operand(g, context, event, core) for g in guard.guards)
    return any(_operand(g, context, event, core) for g in guard.guards)


def _operand(guard: GuardDef, context: Any, event: Event, core: Core | None) -> bool:
    """One operand of a combinator: evaluated without a report of its own, failures raise."""
    if guard.combinator is not None:
        return _combined(guard, context, event, core)
    if guard.fn is None:
        raise ImplementationMissingError("guard", guard.type, path=guard.path)
    if guard.takes_params:
        return bool(guard.fn(context, event, guard.params))
    return bool(guard.fn(context, event))


def _guard_failed(guard: GuardDef, event: Event, exc: Exception, core: Core | None) -> None:
    logger.warning(
        "machine %r: guard %r raised on event %r; treated as false",
        None if core is None else core.machine.id,
        guard.type,
        event.type,
        exc_info=exc,
    )
    if core is not None and core._plugins:
        dispatch(core, core._plugins, "on_guard_error", (guard.type, event, exc))
