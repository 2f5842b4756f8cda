"""Guards: (ctx, event) and {type, params} forms; a raising guard is false, logged, reported."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import Event, MachineLogic, create_machine


def gated(guard: Any) -> dict[str, Any]:
    """A chart where GO passes to 'open' only if the guard allows, else to 'closed'."""
    return {
        "id": "m",
        "initial": "a",
        "context": {"min": 18},
        "states": {
            "a": {"on": {"GO": [{"guard": guard, "target": "open"}, {"target": "closed"}]}},
            "open": {},
            "closed": {},
        },
    }


def go(guards: dict[str, Any], guard: Any, **payload: Any) -> Any:
    """Start the gated chart and send GO with ``payload``."""
    interp = Interp(create_machine(gated(guard), logic=MachineLogic(guards=guards))).start()
    interp.send("GO", **payload)
    return interp


@pytest.mark.parametrize(("age", "target"), [(21, "open"), (12, "closed")])
def test_guard_reads_context_and_event(age: int, target: str) -> None:
    """A (ctx, event) guard sees the context and the event payload."""
    guards = {"adult": lambda ctx, e: e.payload["age"] >= ctx["min"]}
    assert go(guards, "adult", age=age).value == target


@pytest.mark.parametrize(("age", "target"), [(70, "open"), (30, "closed")])
def test_parameterised_guard_gets_params(age: int, target: str) -> None:
    """A {type, params} guard that takes three arguments receives the params."""

    def older_than(ctx: dict[str, Any], event: Event, params: dict[str, Any]) -> bool:
        return bool(event.payload["age"] > params["years"])

    guard = {"type": "olderThan", "params": {"years": 65}}
    assert go({"olderThan": older_than}, guard, age=age).value == target


def test_two_argument_guard_works_with_params_declared() -> None:
    """A (ctx, event) guard still works when the chart gives it params."""
    guard = {"type": "yes", "params": {"unused": 1}}
    assert go({"yes": lambda ctx, e: True}, guard).value == "open"


def test_raising_guard_is_false_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    """A guard that raises counts as false: the fallback is taken, the error logged and hooked."""
    recorder = Recorder()

    def broken(ctx: Any, e: Any) -> bool:
        raise KeyError("missing")

    machine = create_machine(gated("broken"), logic=MachineLogic(guards={"broken": broken}))
    interp = Interp(machine).use(recorder).start()
    receipt = interp.send("GO", wait=True)
    assert interp.value == "closed"
    assert receipt.error is None
    [(name, error)] = recorder.of("on_guard_error")
    assert name == "broken"
    assert isinstance(error, KeyError)
    assert ("broken", False) in recorder.of("on_guard_evaluated")
    assert "guard 'broken' raised" in caplog.text


def test_guard_results_reach_plugins() -> None:
    """on_guard_evaluated reports each guard with its verdict."""
    recorder = Recorder()
    guards = {"no": lambda c, e: False, "yes": lambda c, e: True}
    config = gated("no")
    config["states"]["a"]["on"]["GO"].insert(1, {"guard": "yes", "target": "open"})
    interp = Interp(create_machine(config, logic=MachineLogic(guards=guards)))
    interp.use(recorder).start()
    interp.send("GO")
    assert recorder.of("on_guard_evaluated") == [("no", False), ("yes", True)]
    assert interp.value == "open"


def test_guard_result_is_coerced_to_bool() -> None:
    """A guard returning a truthy non-bool value passes; a falsy one does not."""
    assert go({"g": lambda c, e: [1]}, "g").value == "open"
    assert go({"g": lambda c, e: 0}, "g").value == "closed"


def test_selection_entry_points_answer_outside_a_step() -> None:
    """evaluate_guard, first_enabled and select_transitions give the step's answer, contained."""
    from xsm_celery.engine.selection import (
        DENIED,
        evaluate_guard,
        first_enabled,
        select_transitions,
    )

    def boom(ctx: Any, e: Any) -> bool:
        raise RuntimeError("guard broke")

    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "on": {"GO": [{"guard": "big", "target": "b"}, {"guard": "boom", "target": "c"}]}
            },
            "b": {},
            "c": {},
        },
    }
    logic = MachineLogic(guards={"big": lambda ctx, e: ctx["n"] > 5, "boom": boom})
    interp = Interp(create_machine(config, logic=logic)).start()
    interp.context["n"] = 1
    candidates = interp.machine.get_state("m.a").on["GO"]
    assert evaluate_guard(candidates[0].guard, {"n": 9}, Event("GO")) is True
    assert evaluate_guard(candidates[1].guard, {"n": 9}, Event("GO")) is False
    assert first_enabled(candidates, {"n": 9}, Event("GO")) is candidates[0]
    assert first_enabled(candidates, {"n": 1}, Event("GO")) is None
    assert select_transitions(interp, Event("GO")) == DENIED
    assert select_transitions(interp, Event("NOPE")) is None
    interp.context["n"] = 7
    assert select_transitions(interp, Event("GO")) == (candidates[0],)
    assert interp.value == "a"
