"""Actions mutate context; one that raises is contained wherever it sits."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder, note
from xsm_celery import Event, MachineLogic, create_machine


def boom(interp: Any, ctx: Any, event: Any, action: Any) -> None:
    """An action that always raises."""
    raise RuntimeError(f"boom in {action.params['where'] if action.params else '?'}")


def say(text: str) -> dict[str, Any]:
    """A ``note`` action that appends ``text`` to the log."""
    return {"type": "note", "params": {"text": text}}


def fail(where: str) -> dict[str, Any]:
    """A raising action tagged with where it sits."""
    return {"type": "boom", "params": {"where": where}}


def chart() -> dict[str, Any]:
    """A chart with a raising action in an exit list, a transition list and an entry list."""
    return {
        "id": "m",
        "initial": "a",
        "context": {"log": []},
        "states": {
            "a": {
                "exit": [say("exit a 1"), fail("exit"), say("exit a 2")],
                "on": {
                    "GO": {"target": "b", "actions": [say("t 1"), fail("transition"), say("t 2")]}
                },
            },
            "b": {
                "entry": [say("enter b 1"), fail("entry"), say("enter b 2")],
                "on": {"NEXT": "c"},
            },
            "c": {"entry": say("enter c")},
        },
    }


def started(recorder: Recorder | None = None) -> Any:
    """A started interpreter of :func:`chart`."""
    logic = MachineLogic(actions={"note": note, "boom": boom})
    interp = Interp(create_machine(chart(), logic=logic))
    if recorder is not None:
        interp.use(recorder)
    return interp.start()


def test_raising_actions_skip_the_rest_of_their_list_only() -> None:
    """In exit, transition and entry lists alike, a raise skips that list's remaining actions."""
    interp = started()
    interp.send("GO")
    assert interp.context["log"] == ["exit a 1", "t 1", "enter b 1"]
    assert interp.value == "b"


def test_machine_keeps_running_after_action_errors() -> None:
    """After contained action errors the interpreter still processes events."""
    interp = started()
    interp.send("GO")
    interp.send("NEXT")
    assert interp.value == "c"
    assert interp.status == "running"
    assert interp.context["log"][-1] == "enter c"


def test_action_errors_reach_plugins_and_the_receipt(caplog: pytest.LogCaptureFixture) -> None:
    """Each raise is reported to on_action_error in order; the receipt carries the first."""
    recorder = Recorder()
    interp = started(recorder)
    receipt = interp.send("GO", wait=True)
    errors = recorder.of("on_action_error")
    assert [str(error) for _, error in errors] == [
        "boom in exit",
        "boom in transition",
        "boom in entry",
    ]
    assert str(receipt.error) == "boom in exit"
    assert str(interp.last_error) == "boom in entry"
    assert receipt.changed
    assert "action 'boom' raised" in caplog.text


def test_action_receives_interpreter_context_event_and_definition() -> None:
    """An action is called as (interp, ctx, event, action_def) with the def's params."""
    seen: list[Any] = []

    def spy(interp: Any, ctx: Any, event: Event, action: Any) -> None:
        seen.append(
            (interp, ctx is interp.context, event.type, event.payload, action.type, action.params)
        )

    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": {"E": {"actions": {"type": "spy", "params": {"k": 1}}}}}},
    }
    interp = Interp(create_machine(config, logic=MachineLogic(actions={"spy": spy}))).start()
    interp.send("E", x=2)
    assert seen == [(interp, True, "E", {"x": 2}, "spy", {"k": 1})]


def test_context_is_a_mutable_copy_per_interpreter() -> None:
    """Each interpreter starts from its own deep copy of the chart's context."""
    config = {
        "id": "m",
        "initial": "a",
        "context": {"items": []},
        "states": {"a": {"on": {"ADD": {"actions": "add"}}}},
    }
    logic = MachineLogic(actions={"add": lambda i, c, e, a: c["items"].append(e.payload["v"])})
    machine = create_machine(config, logic=logic)
    one = Interp(machine).start()
    two = Interp(machine).start()
    one.send("ADD", v=1)
    assert one.context["items"] == [1]
    assert two.context["items"] == []
    assert machine.initial_context == {"items": []}


def test_context_can_be_replaced_with_a_dict_only() -> None:
    """Assigning a dict to .context replaces it; anything else is a TypeError."""
    config = {"id": "m", "initial": "a", "states": {"a": {}}}
    interp = Interp(create_machine(config)).start()
    interp.context = {"fresh": True}
    assert interp.context == {"fresh": True}
    with pytest.raises(TypeError):
        interp.context = [1]  # type: ignore[assignment]


def test_action_execute_hook_sees_each_action() -> None:
    """on_action_execute fires before each action, raising ones included."""
    recorder = Recorder()
    interp = started(recorder)
    recorder.calls.clear()
    interp.send("GO")
    assert recorder.of("on_action_execute") == ["note", "boom", "note", "boom", "note", "boom"]
