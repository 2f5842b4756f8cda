"""Eventless ('always') transitions settle in start() and after every step, within a limit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import player_logic
from xsm_celery import MachineLogic, RunawayChainError, create_machine


def counter_chart() -> dict[str, Any]:
    """A chart that counts up with 'always' until a guard stops it."""
    return {
        "id": "m",
        "initial": "idle",
        "context": {"n": 0, "limit": 3},
        "states": {
            "idle": {"on": {"GO": "counting"}},
            "counting": {"always": [{"guard": "full", "target": "full"}, {"target": "bump"}]},
            "bump": {"entry": "inc", "always": "counting"},
            "full": {},
        },
    }


def counter_logic() -> MachineLogic:
    """Logic for :func:`counter_chart`."""
    return MachineLogic(
        actions={"inc": lambda i, ctx, e, a: ctx.__setitem__("n", ctx["n"] + 1)},
        guards={"full": lambda ctx, e: ctx["n"] >= ctx["limit"]},
    )


def test_always_settles_inside_start() -> None:
    """An eventless chain from the initial state is followed before start() returns."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"always": "b"}, "b": {"always": {"target": "c"}}, "c": {}},
    }
    assert Interp(create_machine(config)).start().value == "c"


def test_always_loop_runs_until_its_guard_passes() -> None:
    """A guarded eventless loop runs until the guard stops it, within one send()."""
    interp = Interp(create_machine(counter_chart(), logic=counter_logic())).start()
    interp.send("GO")
    assert interp.value == "full"
    assert interp.context["n"] == 3


def test_always_reacts_to_context_changed_by_a_later_event() -> None:
    """A guard that was false is re-checked after every event's step."""
    interp = Interp(create_machine(load("player"), logic=player_logic())).start()
    interp.send("PLAY")
    interp.send("SEEK")
    assert interp.value == {"active": "seeking"}
    interp.send("SEEKED")
    assert interp.value == {"active": "playing"}


def test_runaway_chain_raises_from_start() -> None:
    """Two states bouncing with unguarded 'always' raise RunawayChainError from start()."""
    config = {"id": "m", "initial": "a", "states": {"a": {"always": "b"}, "b": {"always": "a"}}}
    with pytest.raises(RunawayChainError) as caught:
        Interp(create_machine(config)).start()
    assert caught.value.limit == 1000
    assert "always" in str(caught.value)


def test_runaway_chain_raises_from_send_and_interpreter_survives() -> None:
    """A runaway reached by an event raises from send(); the interpreter still answers."""
    config = counter_chart()
    config["context"]["limit"] = 10**9
    interp = Interp(create_machine(config, logic=counter_logic())).start()
    with pytest.raises(RunawayChainError):
        interp.send("GO")
    assert interp.status == "running"
    assert interp.context["n"] > 0
    assert interp.current_state_ids <= {"m.counting", "m.bump"}


def test_events_ping_ponged_by_actions_are_a_runaway() -> None:
    """Actions that keep sending events to each other are stopped by the same limit."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"on": {"PING": {"target": "b", "actions": "pong"}}},
            "b": {"on": {"PING": {"target": "a", "actions": "pong"}}},
        },
    }
    logic = MachineLogic(actions={"pong": lambda i, c, e, a: i.send("PING")})
    interp = Interp(create_machine(config, logic=logic)).start()
    with pytest.raises(RunawayChainError, match="kept sending"):
        interp.send("PING")


def test_always_on_an_ancestor_applies_to_its_children() -> None:
    """An eventless transition on a parent is checked whatever child is active."""
    config = {
        "id": "m",
        "initial": "p",
        "context": {"stop": False},
        "states": {
            "p": {
                "initial": "a",
                "always": {"guard": "stop", "target": "halted"},
                "states": {"a": {"on": {"NEXT": "b"}}, "b": {}},
            },
            "halted": {},
        },
    }
    logic = MachineLogic(
        guards={"stop": lambda ctx, e: ctx["stop"]},
        actions={},
    )
    interp = Interp(create_machine(config, logic=logic)).start()
    interp.send("NEXT")
    assert interp.value == {"p": "b"}
    interp.context["stop"] = True
    interp.send("ANYTHING")
    assert interp.value == "halted"
