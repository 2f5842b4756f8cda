"""Transition selection: which transitions an event (or no event) enables right now.

Each active leaf looks up its candidates (its own, then its ancestors', precomputed per leaf)
and takes the first whose guard passes. With parallel regions every leaf chooses, a shared
ancestor transition is taken once, and conflicts are resolved as SCXML resolves them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.step import remove_conflicts
from xsm_celery.errors import ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode, Transition
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.machine import Machine

__all__ = ["Selection"]

logger = logging.getLogger("xsm_celery.engine")


class Selection:
    """The selection phase of the interpreter core (a mixin of ``Core``)."""

    machine: Machine
    _context: dict[str, Any]
    _config: frozenset[StateNode]
    _leaves: tuple[StateNode, ...]
    _plugins: list[Any]
    _denied: bool

    def _select(self, event: Event) -> tuple[Transition, ...] | None:
        """The transitions ``event`` enables, or None; sets ``_denied`` when guards refused.

        One active leaf (no parallel state active) is the common case and gets a loop of its
        own, free of the bookkeeping parallel selection needs.
        """
        leaves = self._leaves
        if len(leaves) == 1:
            candidates = leaves[0].handlers.get(event.type)
            if candidates is None:
                return None
            for trans in candidates:
                guard = trans.guard
                if guard is None or self._check(trans, event):
                    return (trans,)
            self._denied = True
            return None
        return self._select_many([leaf.handlers.get(event.type) for leaf in leaves], event)

    def _select_eventless(self, event: Event) -> tuple[Transition, ...] | None:
        """The enabled ``always`` transitions; guards see the event that led here."""
        leaves = self._leaves
        if len(leaves) == 1:
            for trans in leaves[0].eventless:
                if trans.guard is None or self._check(trans, event):
                    return (trans,)
            return None
        return self._select_many([leaf.eventless for leaf in leaves], event)

    def _select_many(
        self, per_leaf: list[tuple[Transition, ...] | None], event: Event
    ) -> tuple[Transition, ...] | None:
        """Selection across parallel regions: each leaf picks its first enabled candidate."""
        selected: list[Transition] = []
        verdicts: dict[Transition, bool] = {}
        handled = False
        for candidates in per_leaf:
            if not candidates:
                continue
            handled = True
            for trans in candidates:
                if trans in selected:
                    break
                ok = verdicts.get(trans)
                if ok is None:
                    ok = verdicts[trans] = trans.guard is None or self._check(trans, event)
                if ok:
                    selected.append(trans)
                    break
        if not selected:
            self._denied = handled
            return None
        if len(selected) > 1:
            selected = remove_conflicts(selected, self._config)
        return tuple(selected)

    def _check(self, trans: Transition, event: Event) -> bool:
        """Evaluate a guard; one that raises (or is missing) is False, logged and reported."""
        guard = trans.guard
        assert guard is not None
        try:
            fn = guard.fn
            if guard.takes_params:
                result = bool(fn(self._context, event, guard.params))  # type: ignore[misc]
            else:
                result = bool(fn(self._context, event))  # type: ignore[misc]
        except Exception as exc:
            self._guard_failed(guard.type, guard.fn is None, event, exc, guard.path)
            result = False
        if self._plugins:
            dispatch(self, self._plugins, "on_guard_evaluated", (guard.type, event, result))
        return result

    def _guard_failed(
        self, name: str, missing: bool, event: Event, exc: Exception, path: str
    ) -> None:
        error: Exception = ImplementationMissingError("guard", name, path=path) if missing else exc
        logger.warning(
            "machine %r: guard %r raised on event %r; treated as false",
            self.machine.id, name, event.type, exc_info=error,
        )  # fmt: skip
        if self._plugins:
            dispatch(self, self._plugins, "on_guard_error", (name, event, error))
