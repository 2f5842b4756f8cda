"""Event descriptors (``*``, ``order.*``), eventless ``""``, stateIn and guard combinators."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import (
    InvalidConfigError,
    MachineLogic,
    SimulatedClock,
    StateNotFoundError,
    create_machine,
)


def start(config: dict[str, Any], logic: MachineLogic | None = None, clock: Any = None) -> Any:
    """A started interpreter of ``config``."""
    return Interp(create_machine(config, logic=logic), clock=clock).start()


def sink(on: dict[str, Any], **states: Any) -> dict[str, Any]:
    """State 'a' with ``on``, plus the target states named in it."""
    return {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": on}, **{k: {} for k in ("any", "order", "exact", "long")}, **states},
    }


def test_star_matches_any_user_event() -> None:
    """'*' takes an event no other descriptor handles."""
    interp = start(sink({"*": "any"}))
    interp.send("WHATEVER")
    assert interp.value == "any"


@pytest.mark.parametrize(
    ("event", "target"),
    [
        ("order", "order"),
        ("order.paid", "long"),
        ("order.paid.late", "long"),
        ("orders", "any"),
        ("order.x", "order"),
    ],
)
def test_prefix_descriptors_match_their_segments_longest_first(event: str, target: str) -> None:
    """'order.*' matches 'order' and 'order.<...>' (not 'orders'); a longer descriptor wins."""
    interp = start(sink({"order.*": "order", "order.paid.*": "long", "*": "any"}))
    interp.send(event)
    assert interp.value == target


def test_an_exact_name_beats_descriptors_of_the_same_state() -> None:
    """Within one state an exact event name is preferred over any wildcard."""
    interp = start(sink({"*": "any", "order.*": "order", "order.paid": "exact"}))
    interp.send("order.paid")
    assert interp.value == "exact"


def test_a_childs_wildcard_is_tried_before_its_parents_exact_handler() -> None:
    """Selection goes from the leaf up: the leaf's '*' wins over an ancestor's exact name."""
    config = {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {
                "initial": "c",
                "on": {"GO": "parent_took"},
                "states": {"c": {"on": {"*": ".d"}}},
            },
            "parent_took": {},
        },
    }
    config["states"]["p"]["states"]["c"]["on"] = {"*": "d"}
    config["states"]["p"]["states"]["d"] = {}
    interp = start(config)
    interp.send("GO")
    assert interp.current_state_ids == {"m.p.d"}


def test_engine_events_never_match_a_wildcard() -> None:
    """A '*' catch-all does not swallow a service result or a timer; their own handlers run."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "invoke": {"src": "work", "onDone": "served"},
                "on": {"*": "caught"},
            },
            "served": {"after": {"100": "timed"}, "on": {"*": "caught"}},
            "timed": {},
            "caught": {},
        },
    }
    clock = SimulatedClock()
    interp = start(config, MachineLogic(services={"work": lambda i, c, e: 1}), clock=clock)
    assert interp.value == "served"
    clock.increment(100)
    assert interp.value == "timed"


def test_wildcards_in_parallel_regions_each_choose() -> None:
    """Each region picks its own candidate, wildcard or exact."""
    config = {
        "id": "m",
        "type": "parallel",
        "states": {
            "r1": {"initial": "a", "states": {"a": {"on": {"job.*": "b"}}, "b": {}}},
            "r2": {"initial": "a", "states": {"a": {"on": {"job.done": "b"}}, "b": {}}},
        },
    }
    interp = start(config)
    interp.send("job.done")
    assert interp.current_state_ids == {"m.r1.b", "m.r2.b"}


@pytest.mark.parametrize("key", ["or*der", "*.order", "order*", "a.*.b"])
def test_malformed_descriptors_are_refused(key: str) -> None:
    """A '*' anywhere but the whole name or a last '.*' segment is refused with its path."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(sink({key: "any"}))
    assert caught.value.path == f"states.a.on.{key}"


def test_empty_event_key_is_an_eventless_transition() -> None:
    """XState v4's '' key behaves as 'always'."""
    config = {
        "id": "m",
        "initial": "a",
        "context": {"ok": False},
        "states": {
            "a": {"on": {"": {"guard": "ok", "target": "b"}, "SET": {"actions": "set"}}},
            "b": {},
        },
    }
    logic = MachineLogic(
        guards={"ok": lambda c, e: c["ok"]}, actions={"set": lambda i, c, e, a: c.update(ok=True)}
    )
    interp = start(config, logic)
    assert interp.value == "a"
    interp.send("SET")
    assert interp.value == "b"


def parallel_with_state_in(guard: Any) -> dict[str, Any]:
    """Region 'door' (closed/open) and region 'motor' whose GO is guarded by ``guard``."""
    return {
        "id": "m",
        "type": "parallel",
        "states": {
            "door": {
                "id": "door",
                "initial": "closed",
                "states": {"closed": {"on": {"OPEN": "open"}}, "open": {"on": {"CLOSE": "closed"}}},
            },
            "motor": {
                "initial": "idle",
                "states": {
                    "idle": {"on": {"GO": {"guard": guard, "target": "running"}}},
                    "running": {},
                },
            },
        },
    }


@pytest.mark.parametrize(
    "guard",
    [
        {"type": "stateIn", "params": {"state": "#door.closed"}},
        {"type": "xstate.stateIn", "params": "door.closed"},
        {"type": "not", "guard": {"type": "stateIn", "params": {"state": "door.open"}}},
    ],
)
def test_state_in_guards_read_the_configuration(guard: Any) -> None:
    """stateIn is true while the named state is active, in any region."""
    interp = start(parallel_with_state_in(guard))
    interp.send("OPEN")
    interp.send("GO")
    assert interp.matches("motor.idle")
    interp.send("CLOSE")
    interp.send("GO")
    assert interp.matches("motor.running")


def test_v4_in_property_is_a_state_in_guard() -> None:
    """A transition's 'in' (XState v4) guards it on a state being active."""
    config = parallel_with_state_in(None)
    del config["states"]["motor"]["states"]["idle"]["on"]["GO"]["guard"]
    config["states"]["motor"]["states"]["idle"]["on"]["GO"]["in"] = "#door.closed"
    interp = start(config)
    interp.send("GO")
    assert interp.matches("motor.running")


def test_state_in_naming_no_state_is_refused() -> None:
    """A stateIn guard for a state the chart lacks is refused at create time."""
    with pytest.raises(StateNotFoundError):
        create_machine(parallel_with_state_in({"type": "stateIn", "params": {"state": "#ghost"}}))


@pytest.mark.parametrize(
    ("guard", "n", "taken"),
    [
        ({"type": "and", "guards": ["pos", "small"]}, 3, True),
        ({"type": "and", "guards": ["pos", "small"]}, 30, False),
        ({"type": "or", "guards": ["neg", {"type": "not", "guard": "small"}]}, 30, True),
        ({"type": "or", "guards": ["neg", {"type": "not", "guard": "small"}]}, 3, False),
        ({"type": "xstate.not", "guards": [{"type": "below", "params": {"limit": 5}}]}, 7, True),
    ],
)
def test_guard_combinators_in_json(guard: Any, n: int, taken: bool) -> None:
    """and / or / not nest named and parameterised guards."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": {"GO": {"guard": guard, "target": "b"}}}, "b": {}},
    }
    logic = MachineLogic(
        guards={
            "pos": lambda c, e: e.payload["n"] > 0,
            "neg": lambda c, e: e.payload["n"] < 0,
            "small": lambda c, e: e.payload["n"] < 10,
            "below": lambda c, e, p: e.payload["n"] < p["limit"],
        }
    )
    interp = start(config, logic)
    interp.send("GO", n=n)
    assert interp.value == ("b" if taken else "a")


def test_a_combinator_with_a_raising_operand_is_false_and_reported() -> None:
    """An operand that raises makes the whole guard false, reported once as a guard error."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "on": {"GO": {"guard": {"type": "and", "guards": ["ok", "boom"]}, "target": "b"}}
            },
            "b": {},
        },
    }

    def boom(c: Any, e: Any) -> bool:
        raise RuntimeError("operand broke")

    recorder = Recorder()
    machine = create_machine(
        config, logic=MachineLogic(guards={"ok": lambda c, e: True, "boom": boom})
    )
    interp = Interp(machine).use(recorder).start()
    interp.send("GO")
    assert interp.value == "a"
    assert [name for name, _ in recorder.of("on_guard_error")] == ["and"]


@pytest.mark.parametrize(
    "guard", [{"type": "and", "guards": []}, {"type": "not", "guards": ["a", "b"]}, {"type": "or"}]
)
def test_malformed_combinators_are_refused(guard: Any) -> None:
    """A combinator without operands (or 'not' with two) is refused with its path."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": {"GO": {"guard": guard, "target": "a"}}}},
    }
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(config)
    assert caught.value.path == "states.a.on.GO.guard"
