"""The records the graph tools return: a :class:`Step` between configurations and a :class:`Path`.

A path is data a test can replay: each step is an event sent, a clock advance that fires the
next ``after`` timer, or the result of an invocation (``done.invoke.<id>`` or
``error.platform.<id>``), with the guard outcomes it assumed. A guard answers from the
context, which a chart's own actions build; a path found with guards taken either way says
which answer each step needs, and :func:`forceable` builds a machine whose guards give those
answers while a path replays, so a path holds on the machine whatever its context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import EngineEvent
from xsm_celery.engine.logic import MachineLogic, accepts_params
from xsm_celery.engine.machine import Machine, create_machine
from xsm_celery.engine.queries import next_timer
from xsm_celery.errors import ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.clock import SimulatedClock
    from xsm_celery.engine.sync import SyncInterpreter

__all__ = [
    "INVOCATION_RESULT_PREFIXES",
    "Path",
    "Step",
    "apply_step",
    "forceable",
    "forced_guards",
    "guard_names",
    "is_forceable",
    "refused_guards",
]

#: The event types of a step that delivers an invocation's result rather than a sent event.
INVOCATION_RESULT_PREFIXES = ("done.invoke.", "error.platform.")

#: The attribute that marks a guard :func:`forceable` wrapped.
_FORCEABLE_MARK = "xsm_forceable"

#: The guards answering False while a step replays (None: no path is replaying).
_refused: ContextVar[frozenset[str] | None] = ContextVar("xsm_graph_refused", default=None)


@dataclass(frozen=True)
class Step:
    """One edge of the graph: an event, a clock advance, or an invocation's result.

    Attributes:
        event: The event type sent (``done.invoke.<id>`` / ``error.platform.<id>`` for an
            invocation's result), or None for a clock advance.
        delay_ms: For a clock advance, the delay of the timer it fires; None for events and
            for a named delay the logic does not give (then ``assumptions`` holds
            ``"delay:<name>=unknown"``).
        from_states: The active leaf ids before the step.
        to_states: The active leaf ids after it.
        assumptions: The guards this step needs to answer False (``"guard:isPaid=False"``);
            every other guard it evaluates answers True.
    """

    event: str | None
    delay_ms: float | None
    from_states: frozenset[str]
    to_states: frozenset[str]
    assumptions: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The step as ``event_string`` writes it: ``PAY``, ``+1000`` or ``+?``."""
        if self.event is not None:
            return self.event
        return "+?" if self.delay_ms is None else f"+{_number(self.delay_ms)}"


@dataclass(frozen=True)
class Path:
    """A replayable sequence of steps from the initial configuration to ``final_states``."""

    steps: tuple[Step, ...]
    final_states: frozenset[str]

    @property
    def total_delay_ms(self) -> float:
        """The clock advance the whole path needs (unknown named delays count as 0)."""
        return float(sum(step.delay_ms or 0.0 for step in self.steps))

    def event_string(self) -> str:
        """The steps as one line, ``xsm simulate``'s grammar: ``"SUBMIT,+2000,PAY"``."""
        return ",".join(step.label for step in self.steps)

    def replay(self, interp: SyncInterpreter, clock: SimulatedClock) -> None:
        """Drive ``interp`` (running on ``clock``) through every step; start it if need be.

        On a machine from :func:`forceable` each step's guards answer as the step assumes;
        on any other machine the chart's own guards decide, so the path may lead elsewhere.
        """
        if interp.status == "not_started":
            interp.start()
        for step in self.steps:
            with forced_guards(refused_guards(step.assumptions)):
                apply_step(interp, clock, step.event)


def apply_step(interp: SyncInterpreter, clock: SimulatedClock, event: str | None) -> None:
    """Carry out one step: send ``event``, deliver an invocation's result, or fire a timer.

    A clock advance moves ``clock`` to the earliest pending ``after`` timer, whatever its
    delay, so a path found with stand-in delays replays on the real ones.
    """
    if event is None:
        timer = next_timer(interp)
        if timer is not None:
            clock.increment(max(0.0, timer.due - clock.now()))
        return
    if event.startswith(INVOCATION_RESULT_PREFIXES):
        invoke_id = event.split(".", 2)[2]
        interp.send_threadsafe(EngineEvent(event, None, invoke_id))
        interp.tick()
        return
    interp.send(event)


def refused_guards(assumptions: tuple[str, ...]) -> frozenset[str]:
    """The guard names ``assumptions`` want False (``"guard:<name>=False"`` entries)."""
    names = set()
    for item in assumptions:
        kind, _, rest = item.partition(":")
        name, _, value = rest.rpartition("=")
        if kind == "guard" and value == "False":
            names.add(name)
    return frozenset(names)


@contextmanager
def forced_guards(refused: frozenset[str]) -> Iterator[None]:
    """While inside, every :func:`forceable` machine's guards answer ``name not in refused``."""
    token = _refused.set(refused)
    try:
        yield
    finally:
        _refused.reset(token)


def guard_names(machine: Machine) -> list[str]:
    """Every named guard the chart's transitions use (combinator operands included), sorted."""
    names: set[str] = set()
    pending = [t.guard for t in machine.transitions if t.guard is not None]
    while pending:
        guard = pending.pop()
        if guard.combinator is None:
            names.add(guard.type)
        pending.extend(guard.guards)
    return sorted(names)


def forceable(machine: Machine) -> Machine:
    """The same chart and logic, whose guards a replaying :class:`Path` can force.

    Outside a replay each guard calls the logic's own; while a path's step replays it
    answers as the step assumes. Build a workflow (or an interpreter) on the result to run
    the paths the graph tools find with guards taken either way.
    """
    wrapped = {
        name: _forcing(name, machine.logic.guards.get(name)) for name in guard_names(machine)
    }
    return create_machine(
        machine.config,
        logic=machine.logic.merge(MachineLogic(guards=wrapped)),
        context_validator=machine.context_validator,
        max_iterations=machine.max_iterations,
    )


def _forcing(name: str, real: Callable[..., Any] | None) -> Callable[..., bool]:
    takes_params = real is not None and accepts_params(real)

    def guard(ctx: Any, event: Any, *params: Any) -> bool:
        refused = _refused.get()
        if refused is not None:
            return name not in refused
        if real is None:
            raise ImplementationMissingError("guard", name)
        return bool(real(ctx, event, *params) if takes_params else real(ctx, event))

    guard.__name__ = f"forceable_{name}"
    setattr(guard, _FORCEABLE_MARK, True)
    return guard


def is_forceable(machine: Machine) -> bool:
    """Whether every named guard of ``machine`` comes from :func:`forceable`."""
    pending = [t.guard for t in machine.transitions if t.guard is not None]
    while pending:
        guard = pending.pop()
        if guard.combinator is None and not getattr(guard.fn, _FORCEABLE_MARK, False):
            return False
        pending.extend(guard.guards)
    return True


def _number(ms: float) -> str:
    return str(int(ms)) if math.isfinite(ms) and ms == int(ms) else repr(ms)
