"""Questions an integration asks a machine at rest, answered by the engine's own rules.

A Celery run needs to know, before it hands a retry to the broker, where the pending ``after``
timer will lead when it fires in the next run, and it needs to restart a chart whose snapshot
no longer fits while keeping the context. Both answers belong to the engine: the first is the
transition selection an event would make (through the interpreter's one guard-evaluation path,
so a guard that raises is logged and reported to plugins exactly as when it fires), the second
is an interpreter built the way a restore builds one. Nothing here moves the machine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from xsm_celery.engine.events import EngineEvent
from xsm_celery.engine.selection import select_transitions
from xsm_celery.engine.state import NOT_STARTED

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode, Transition
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.machine import Machine
    from xsm_celery.engine.runtime import Core
    from xsm_celery.engine.timers import Timer

__all__ = ["fresh_interpreter", "next_timer", "timer_entries", "timer_transitions"]

CoreT = TypeVar("CoreT", bound="Core")


def next_timer(interp: Core) -> Timer | None:
    """The earliest pending ``after`` timer of ``interp``, or None when nothing waits.

    Delayed events (``raise`` or ``sendTo`` with a delay) are timers too but lead to no
    transition of their own, so they are skipped.
    """
    for timer in interp.pending_timers():
        if timer.after is not None:
            return timer
    return None


def timer_transitions(interp: Core, timer: Timer | None = None) -> tuple[Transition, ...]:
    """The transitions ``timer`` (default: the earliest) would take if it fired now.

    Selection runs as it does when the timer's event arrives: the active leaves' candidates,
    first enabled guard wins, guards evaluated (and reported) by the interpreter. Guards read
    the context, which nothing changes while a machine waits, so the answer holds until the
    timer fires. Empty when no timer is pending or every guard refuses.
    """
    if timer is None:
        timer = next_timer(interp)
        if timer is None:
            return ()
    if timer.after is None or timer.node is None:
        return ()
    selected = select_transitions(interp, EngineEvent(timer.after.event_type, None, timer.node.id))
    return selected or ()


def timer_entries(interp: Core, timer: Timer | None = None) -> tuple[StateNode, ...]:
    """The states the timer's transitions would enter (targets and their initial descendants)."""
    entered: list[StateNode] = []
    for transition in timer_transitions(interp, timer):
        for node in transition.entry:
            if node not in entered:
                entered.append(node)
    return tuple(entered)


def fresh_interpreter(
    cls: type[CoreT],
    machine: Machine,
    context: Mapping[str, Any],
    clock: Clock | None = None,
) -> CoreT:
    """A not-started interpreter of ``cls`` for ``machine`` whose context is ``context``.

    This is a restart that keeps what the machine had learnt (a counter, an error chain)
    while forgetting where it was, for a snapshot whose chart has changed. The context is
    deep-copied so the caller's mapping is never mutated; call ``start()`` to enter the
    initial states (their entry actions then see this context).
    """
    interp = cls.__new__(cls)
    interp._setup(machine, clock, copy.deepcopy(dict(context)))
    assert interp.status == NOT_STARTED
    return interp
