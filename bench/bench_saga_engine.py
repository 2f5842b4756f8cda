"""Sagas in process: one three-step saga run end to end, xsm_celery next to xstate-statemachine.

The same ``SagaBuilder`` declaration (reserve -> charge -> ship, with compensations) is built
by both libraries; each run starts a fresh interpreter on a simulated clock and drives it to
a final state, once where every step succeeds and once where the last step fails and two
compensations run. The machine is created once per library, as a service would. Logging is
disabled while timing (0.11.0 logs each service failure with a traceback). The Celery
saga (steps as Celery tasks, next to a canvas ``chain``) is measured by the workflow bench.

Run: ``python -m bench.bench_saga_engine``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bench.timing import per_call_us, table

RUNS = 2_000


def _services(fail_last: bool) -> dict[str, Callable[..., Any]]:
    def ok(interp: Any, ctx: Any, event: Any) -> str:
        return "ok"

    def boom(interp: Any, ctx: Any, event: Any) -> str:
        raise RuntimeError("ship failed")

    return {
        "reserveStock": ok,
        "releaseStock": ok,
        "chargeCard": ok,
        "refundCard": ok,
        "ship": boom if fail_last else ok,
    }


def _runner(lib: Any, fail_last: bool) -> Callable[[], object]:
    """A zero-argument function running one saga to its final state with library ``lib``."""
    saga = (
        lib.patterns.SagaBuilder("fulfil")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", compensate="refundCard")
        .step("ship", invoke="ship")
    )
    logic = saga.logic().merge(lib.MachineLogic(services=_services(fail_last)))
    machine = lib.create_machine(saga.build(), logic=logic)
    expected = "fulfil.failed" if fail_last else "fulfil.completed"

    def run() -> object:
        interp = lib.SyncInterpreter(machine, clock=lib.SimulatedClock()).start()
        assert expected in interp.current_state_ids
        return interp

    return run


def _libraries() -> dict[str, Any]:
    import xsm_celery
    import xsm_celery.patterns

    found: dict[str, Any] = {"xsm_celery": xsm_celery}
    try:
        import xstate_statemachine
        import xstate_statemachine.patterns

        found["xstate-statemachine 0.11.0"] = xstate_statemachine
    except ImportError:
        print("xstate-statemachine is not installed; skipped")
    return found


def main() -> None:
    """Print microseconds per saga run and the ratio to xsm_celery, for both outcomes."""
    logging.disable(logging.CRITICAL)
    rows = []
    for outcome, fail_last in (("completed", False), ("failed, 2 compensations", True)):
        measured = {
            name: per_call_us(_runner(lib, fail_last), number=RUNS, repeat=3)
            for name, lib in _libraries().items()
        }
        ours = measured["xsm_celery"]
        for name, us in measured.items():
            rows.append([outcome, name, f"{us:.1f}", f"{us / ours:.2f}x"])
    print(table(["saga run", "library", "us per run", "vs xsm_celery"], rows))


if __name__ == "__main__":
    main()
