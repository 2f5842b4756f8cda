"""Transitions: shapes of 'on', target forms, targetless, reenter, selection order."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder, count, note, player_logic
from xsm_celery import Event, InvalidEventError, MachineLogic, create_machine


def run(config: dict[str, Any], logic: MachineLogic | None = None) -> Any:
    """A started interpreter of ``config``."""
    return Interp(create_machine(config, logic=logic)).start()


def test_toggle_flips_and_counts() -> None:
    """The toggle fixture flips state and runs its transition action each time."""
    interp = run(load("toggle"), MachineLogic(actions={"count": count}))
    for expected in ("on", "off", "on"):
        interp.send("FLIP")
        assert interp.value == expected
    assert interp.context["flips"] == 3


@pytest.mark.parametrize(
    "spec",
    ["b", {"target": "b"}, [{"target": "b"}], [{"guard": "no", "target": "a"}, "b"]],
)
def test_on_accepts_str_object_and_list(spec: Any) -> None:
    """A string, an object and a list of candidates all express the same transition."""
    config = {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": spec}}, "b": {}}}
    interp = run(config, MachineLogic(guards={"no": lambda c, e: False}))
    interp.send("GO")
    assert interp.current_state_ids == {"m.b"}


def test_first_passing_candidate_wins() -> None:
    """Guarded candidates are tried in order and only the first passing one is taken."""
    seen: list[str] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "on": {
                    "GO": [
                        {"guard": "small", "target": "s"},
                        {"guard": "medium", "target": "md"},
                        {"guard": "medium", "target": "never"},
                        {"target": "l"},
                    ]
                }
            },
            "s": {},
            "md": {},
            "never": {},
            "l": {},
        },
    }

    def guard(limit: int, name: str) -> Any:
        def check(ctx: Any, e: Event) -> bool:
            seen.append(name)
            return bool(e.payload["n"] < limit)

        return check

    logic = MachineLogic(guards={"small": guard(10, "small"), "medium": guard(100, "medium")})
    machine = create_machine(config, logic=logic)
    for n, target in ((5, "s"), (50, "md"), (500, "l")):
        seen.clear()
        interp = Interp(machine).start()
        interp.send("GO", n=n)
        assert interp.value == target
    assert seen == ["small", "medium", "medium"]


def test_unhandled_event_is_a_no_op() -> None:
    """An event no active state handles changes nothing and reports changed=False."""
    interp = run(load("toggle"), MachineLogic(actions={"count": count}))
    receipt = interp.send("NOPE", wait=True)
    assert interp.value == "off"
    assert (receipt.changed, receipt.denied, receipt.error) == (False, False, None)


def test_all_guards_false_reports_denied() -> None:
    """When the state handles the event but every guard says no, the receipt is denied."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": {"GO": {"guard": "no", "target": "b"}}}, "b": {}},
    }
    interp = run(config, MachineLogic(guards={"no": lambda c, e: False}))
    receipt = interp.send("GO", wait=True)
    assert receipt.denied
    assert not receipt.changed
    assert receipt.state_ids == frozenset({"m.a"})


def test_targetless_transition_runs_actions_without_exit_or_entry() -> None:
    """A transition with no target runs its actions and leaves the states as they are."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    interp.context["log"].clear()
    interp.send("VOLUME", level=9)
    assert interp.context["volume"] == 9
    assert interp.context["log"] == []
    assert interp.value == {"active": "playing"}


def test_self_target_without_reenter_changes_nothing() -> None:
    """Targeting the source itself without reenter runs no exit or entry (as 0.11.0)."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    interp.send("PAUSE")
    interp.context["log"].clear()
    interp.send("PAUSE")
    assert interp.context["log"] == []


def test_reenter_on_a_leaf_exits_and_enters_it() -> None:
    """reenter: true on a self-transition of a leaf runs its exit then its entry."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    interp.context["log"].clear()
    interp.send("TICK")
    assert interp.context["log"] == ["exit playing", "enter playing"]


def test_reenter_on_a_compound_restarts_it_from_its_initial_child() -> None:
    """Re-entering a compound state exits its active child and itself, then re-enters both."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    interp.send("PAUSE")
    interp.context["log"].clear()
    interp.send("RESTART")
    assert interp.context["log"] == ["exit paused", "exit active", "enter active", "enter playing"]
    assert interp.value == {"active": "playing"}


def test_parent_to_child_transition_keeps_the_parent() -> None:
    """A parent handler targeting its own child ('.seeking') does not exit the parent."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    interp.context["log"].clear()
    interp.send("SEEK")
    assert interp.context["log"] == ["exit playing"]
    assert interp.value == {"active": "seeking"}


def test_deep_and_custom_id_targets() -> None:
    """A dotted target enters a nested state; '#off' reaches a state by its custom id."""
    interp = run(load("player"), player_logic())
    interp.send("PLAY")
    assert interp.current_state_ids == {"player.active.playing"}
    interp.send("POWER")
    assert interp.current_state_ids == {"player.off"}


@pytest.mark.parametrize("target", ["b.c2", "#deep.c2", "m.b.c2", "#m.b.c2", "#bee.c2"])
def test_target_forms_resolve(target: str) -> None:
    """Sibling paths, custom ids, ids with a path and full ids all resolve."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"on": {"GO": target}},
            "b": {
                "id": "bee",
                "initial": "c1",
                "states": {"c1": {}, "c2": {"id": "deep"}},
            },
        },
    }
    if target == "#deep.c2":
        config["states"]["b"]["states"]["c2"] = {"id": "deep2"}
        config["states"]["a"]["on"]["GO"] = "#deep2"
    interp = run(config)
    interp.send("GO")
    assert interp.current_state_ids == {"m.b.c2"}


def test_root_level_handler_applies_in_every_state() -> None:
    """A handler on the root is inherited by every leaf."""
    config = {
        "id": "m",
        "initial": "a",
        "on": {"RESET": ".a"},
        "states": {"a": {"on": {"GO": "b"}}, "b": {}},
    }
    interp = run(config)
    interp.send("GO")
    interp.send("RESET")
    assert interp.value == "a"


def test_leaf_handler_shadows_ancestor_handler() -> None:
    """The deepest state's handler for an event wins over its ancestors'."""
    config = {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {"initial": "a", "on": {"GO": "q"}, "states": {"a": {"on": {"GO": "b"}}, "b": {}}},
            "q": {},
        },
    }
    interp = run(config)
    interp.send("GO")
    assert interp.value == {"p": "b"}
    interp.send("GO")
    assert interp.value == "q"


def test_guard_false_on_leaf_falls_through_to_ancestor() -> None:
    """When the leaf's candidates are all guarded off, the parent's handler is tried."""
    config = {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {
                "initial": "a",
                "on": {"GO": "q"},
                "states": {"a": {"on": {"GO": {"guard": "no", "target": "b"}}}, "b": {}},
            },
            "q": {},
        },
    }
    interp = run(config, MachineLogic(guards={"no": lambda c, e: False}))
    interp.send("GO")
    assert interp.value == "q"


def test_exit_transition_entry_order_across_levels() -> None:
    """Exit actions run deepest first, then transition actions, then entry top-down."""
    actions = {"note": note}
    config = {
        "id": "m",
        "initial": "a",
        "context": {"log": []},
        "states": {
            "a": {
                "initial": "a1",
                "exit": {"type": "note", "params": {"text": "exit a"}},
                "states": {
                    "a1": {
                        "exit": {"type": "note", "params": {"text": "exit a1"}},
                        "on": {
                            "GO": {
                                "target": "#b1",
                                "actions": {"type": "note", "params": {"text": "go"}},
                            }
                        },
                    }
                },
            },
            "b": {
                "initial": "b0",
                "entry": {"type": "note", "params": {"text": "enter b"}},
                "states": {
                    "b0": {},
                    "b1": {"id": "b1", "entry": {"type": "note", "params": {"text": "enter b1"}}},
                },
            },
        },
    }
    interp = run(config, MachineLogic(actions=actions))
    interp.send("GO")
    assert interp.context["log"] == ["exit a1", "exit a", "go", "enter b", "enter b1"]


@pytest.mark.parametrize(
    "shape",
    [lambda: "FLIP", lambda: Event("FLIP"), lambda: {"type": "FLIP"}],
)
def test_send_accepts_every_event_shape(shape: Any) -> None:
    """send() takes a str, an Event or a {'type': ...} mapping."""
    interp = run(load("toggle"), MachineLogic(actions={"count": count}))
    interp.send(shape())
    assert interp.value == "on"


def test_payload_reaches_actions_and_guards() -> None:
    """Keyword payload, Event payload and mapping keys all arrive as event.payload."""
    got: list[dict[str, Any]] = []
    config = {"id": "m", "initial": "a", "states": {"a": {"on": {"E": {"actions": "grab"}}}}}
    interp = run(config, MachineLogic(actions={"grab": lambda i, c, e, a: got.append(e.payload)}))
    interp.send("E", x=1)
    interp.send(Event("E", {"x": 2}))
    interp.send({"type": "E", "x": 3})
    interp.send({"type": "E", "payload": {"x": 4}})
    interp.send(Event("E", {"x": 5}), y=6)
    assert got == [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}, {"x": 5, "y": 6}]


@pytest.mark.parametrize("bad", [None, 42, "", {"no": "type"}, {"type": ""}, {"type": 3}])
def test_malformed_events_raise_invalid_event_error(bad: Any) -> None:
    """Something that is not an event raises InvalidEventError, which is also a TypeError."""
    interp = run(load("toggle"), MachineLogic(actions={"count": count}))
    with pytest.raises(InvalidEventError):
        interp.send(bad)
    with pytest.raises(TypeError):
        interp.send(bad)


def test_on_transition_reports_configurations_before_and_after() -> None:
    """on_transition gets the full active sets before and after, ancestors included."""
    recorder = Recorder()
    interp = Interp(create_machine(load("player"), logic=player_logic())).use(recorder)
    interp.start()
    interp.send("PLAY")
    before, after, event = recorder.of("on_transition")[-1]
    assert before == ["player", "player.stopped"]
    assert after == ["player", "player.active", "player.active.playing"]
    assert event == "PLAY"


def test_events_sent_from_actions_run_after_the_step() -> None:
    """An action's send() is queued and processed once the current step has settled."""
    order: list[str] = []

    def kick(interp: Any, ctx: Any, e: Any, a: Any) -> None:
        interp.send("NEXT")
        order.append(f"kick saw {interp.value}")

    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"on": {"GO": {"target": "b", "actions": "kick"}}},
            "b": {"entry": "entered", "on": {"NEXT": "c"}},
            "c": {},
        },
    }
    logic = MachineLogic(
        actions={"kick": kick, "entered": lambda i, c, e, a: order.append("b entered")}
    )
    interp = run(config, logic)
    interp.send("GO")
    assert order == ["kick saw a", "b entered"]
    assert interp.value == "c"
