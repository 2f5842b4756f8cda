"""Step a chart through events (``xsm simulate``), with stub logic where none is given.

The stub makes any chart runnable without its code: an action does nothing, a guard passes,
a service returns None at once (so ``onDone`` is taken), and a named delay is left
unresolved (its timer is not armed). Logic given for some names replaces the stub for those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.engine.builtins import canonical_builtin
from xsm_celery.engine.clock import SimulatedClock
from xsm_celery.engine.logic import MachineLogic
from xsm_celery.engine.machine import create_machine
from xsm_celery.engine.redact import public_context
from xsm_celery.engine.sync import SyncInterpreter

__all__ = ["Step", "UnresolvedDelayError", "simulate", "stub_logic"]


class UnresolvedDelayError(LookupError):
    """Raised by the simulator's stub delays: the timer stays unarmed."""


@dataclass(frozen=True)
class Step:
    """One line of a simulation: the event sent and where the machine settled."""

    event: str
    states: tuple[str, ...]
    context: dict[str, Any]
    error: str | None


def stub_logic(chart: Mapping[str, Any], logic: MachineLogic | None) -> MachineLogic:
    """Stubs for every name the chart uses that ``logic`` does not give."""
    machine = create_machine(chart)
    stubs = MachineLogic(
        actions={
            n: _no_op
            for k, n, _ in machine.missing
            if k == "action" and canonical_builtin(n) is None
        },
        guards={n: _passes for k, n, _ in machine.missing if k == "guard"},
        services={n: _returns_none for k, n, _ in machine.missing if k == "service"},
        delays={n: _unresolved for k, n, _ in machine.missing if k == "delay"},
    )
    return stubs.merge(logic) if logic is not None else stubs


def _no_op(interp: Any, ctx: Any, event: Any, action: Any) -> None:
    return None


def _passes(ctx: Any, event: Any) -> bool:
    return True


def _returns_none(interp: Any, ctx: Any, event: Any) -> None:
    return None


def _unresolved(ctx: Any, event: Any) -> float:
    raise UnresolvedDelayError("the simulator's stub logic leaves named delays unresolved")


def simulate(
    chart: Mapping[str, Any], events: Iterable[str], logic: MachineLogic | None = None
) -> list[Step]:
    """Start the chart and send each event; one :class:`Step` for the start and each event."""
    machine = create_machine(chart, logic=stub_logic(chart, logic))
    interp = SyncInterpreter(machine, clock=SimulatedClock())
    interp.start()
    steps = [
        Step(
            "(start)", tuple(sorted(interp.current_state_ids)), public_context(interp.context), None
        )
    ]
    for name in events:
        receipt = interp.send(name, wait=True)
        failed = receipt.error
        error = None if failed is None else f"{type(failed).__name__}: {failed}"
        steps.append(
            Step(name, tuple(sorted(receipt.state_ids)), public_context(interp.context), error)
        )
    return steps
