"""Saga services for the tests: recorded calls, scripted failures, a step that never ends."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from xsm_celery.engine import (
    MachineLogic,
    SimulatedClock,
    SyncInterpreter,
    create_machine,
    from_callback,
)
from xsm_celery.patterns import SagaBuilder


class Calls:
    """Services that record their calls in order and fail as scripted."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def service(self, name: str, fail: int | bool = False) -> Callable[..., Any]:
        """A service named ``name`` that raises on its first ``fail`` calls (always if True)."""
        seen = {"n": 0}

        def run(interp: Any, ctx: dict[str, Any], event: Any) -> str:
            self.order.append(name)
            seen["n"] += 1
            if fail is True or (fail and seen["n"] <= int(fail)):
                raise RuntimeError(f"{name} failed (call {seen['n']})")
            return f"{name}-ok"

        return run


def hang(name: str, calls: Calls) -> Any:
    """A callback actor that records its start and never answers (for timeouts)."""

    def setup(send_back: Any, receive: Any, ctx: Any, event: Any) -> None:
        calls.order.append(name)

    return from_callback(setup)


def run_saga(
    saga: SagaBuilder,
    services: dict[str, Any],
    *,
    actions: dict[str, Any] | None = None,
    plugins: Iterable[Any] = (),
) -> tuple[SyncInterpreter, SimulatedClock]:
    """Start the saga's machine on a simulated clock with the given services."""
    logic = saga.logic().merge(MachineLogic(services=services, actions=actions or {}))
    machine = create_machine(saga.build(), logic=logic, strict_config=True)
    clock = SimulatedClock()
    interp = SyncInterpreter(machine, clock=clock)
    for plugin in plugins:
        interp.use(plugin)
    return interp.start(), clock
