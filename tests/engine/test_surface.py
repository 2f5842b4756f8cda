"""The rest of 0.11.0's surface: send_events, get_meta, Machine.initial, chain_limit, is_running,
every matches spelling, 0.11.0 snapshots restored; wait_for and to_promise on the async engine."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import player_logic
from tests.engine.test_history import player
from xsm_celery import (
    Interpreter,
    MachineLogic,
    RunawayChainError,
    SimulatedClock,
    StateNotFoundError,
    WallClock,
    create_machine,
)
from xsm_celery.engine.snapshot import SNAPSHOT_FORMAT


def nested() -> dict[str, Any]:
    """A parallel region inside a compound, with meta on some states."""
    return {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {
                "id": "par",
                "type": "parallel",
                "meta": {"screen": "main"},
                "states": {
                    "r1": {
                        "initial": "a",
                        "states": {"a": {"meta": {"hint": "A"}, "on": {"GO": "b"}}, "b": {}},
                    },
                    "r2": {"initial": "x", "states": {"x": {}}},
                },
            },
            "q": {},
        },
    }


def test_send_events_sends_each_in_order() -> None:
    """send_events processes a list of events like consecutive sends."""
    interp = Interp(
        create_machine(
            load("toggle"),
            logic=MachineLogic(
                actions={"count": lambda i, c, e, a: c.__setitem__("n", c.get("n", 0) + 1)}
            ),
        )
    ).start()
    interp.send_events(["FLIP", {"type": "FLIP"}, "FLIP"])
    assert (interp.value, interp.context["n"]) == ("on", 3)


def test_get_meta_and_initial_and_is_running() -> None:
    """get_meta collects active states' meta by id; Machine.initial is the root's initial key."""
    machine = create_machine(nested())
    interp = Interp(machine)
    assert interp.is_running is False
    interp.start()
    assert interp.is_running is True
    assert interp.get_meta() == {"m.p": {"screen": "main"}, "m.p.r1.a": {"hint": "A"}}
    assert machine.initial == "p"
    interp.stop()
    assert interp.is_running is False


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("m.p.r1.a", True),
        ("p.r1.a", True),
        ("#par", True),
        ("#par.r1.a", True),
        ("r1.a", True),
        ("a", True),
        ("b", False),
        ("q", False),
        ({"p": {"r1": "a"}}, True),
        ({"p": {"r1": "b"}}, False),
        ({"p": {"r1": "a", "r2": "x"}}, True),
        ({"p": "r2"}, True),
    ],
)
def test_matches_takes_every_spelling(spelling: Any, expected: bool) -> None:
    """Full ids, paths, #ids, trailing parts and value dicts all work."""
    interp = Interp(create_machine(nested())).start()
    assert interp.matches(spelling) is expected


@pytest.mark.parametrize("typo", ["nope", "#ghost", {"p": {"r3": "a"}}])
def test_matches_refuses_states_the_chart_lacks(typo: Any) -> None:
    """A typo raises StateNotFoundError instead of reading as False."""
    interp = Interp(create_machine(nested())).start()
    with pytest.raises(StateNotFoundError):
        interp.matches(typo)


def test_chain_limit_is_configurable() -> None:
    """create_machine(chain_limit=) bounds an always-cycle; a non-positive limit is refused."""
    config = {"id": "m", "initial": "a", "states": {"a": {"always": "b"}, "b": {"always": "a"}}}
    machine = create_machine(config, chain_limit=7)
    with pytest.raises(RunawayChainError) as caught:
        Interp(machine).start()
    assert caught.value.limit == 7
    with pytest.raises(ValueError, match="chain_limit"):
        create_machine(config, chain_limit=0)


def test_a_snapshot_written_by_xstate_statemachine_0_11_0_restores() -> None:
    """0.11.0's version-4 snapshot (its own hash, keyless deadlines, parent-keyed history) restores."""
    xsm = pytest.importorskip("xstate_statemachine")
    logging.disable(logging.CRITICAL)
    try:
        theirs_machine = xsm.create_machine(
            player("deep"), logic=xsm.MachineLogic(actions={"note": lambda *a: None})
        )
        theirs = xsm.SyncInterpreter(theirs_machine).start()
        for event in ("NEXT", "NEXT", "OFF"):
            theirs.send(event)
        saved = theirs.get_snapshot()
    finally:
        logging.disable(logging.NOTSET)
    assert "format" not in json.loads(saved)
    machine = create_machine(player("deep"), logic=player_logic())
    restored = Interp.from_snapshot(saved, machine)
    assert restored.current_state_ids == {"m.off"}
    restored.send("BACK")
    assert restored.current_state_ids == {"m.on.b.b2"}
    assert json.loads(restored.get_snapshot())["format"] == SNAPSHOT_FORMAT


def test_a_0_11_0_snapshot_with_a_pending_timer_fires_it() -> None:
    """A timer pending in a 0.11.0 snapshot is re-armed for its wall-clock due time."""
    xsm = pytest.importorskip("xstate_statemachine")
    chart = {
        "id": "t",
        "initial": "wait",
        "states": {"wait": {"after": {"500": "done"}}, "done": {}},
    }
    logging.disable(logging.CRITICAL)
    try:
        theirs = xsm.SyncInterpreter(xsm.create_machine(chart), clock=xsm.SimulatedClock()).start()
        saved = json.loads(theirs.get_snapshot())
    finally:
        logging.disable(logging.NOTSET)
    # 0.11.0 reads the wall clock once when it arms the timer and again when it takes the
    # snapshot, so the time left is 500 ms less however long start() took on this machine.
    left_ms = (saved["deadlines"][0]["due_at_wall"] - saved["taken_at"]) * 1000.0
    assert 0 < left_ms <= 500
    clock = SimulatedClock(wall_start=saved["taken_at"])
    restored = Interp.from_snapshot(saved, create_machine(chart), clock=clock)
    clock.increment(max(0.0, left_ms - 0.5))
    assert restored.value == "wait"
    clock.increment(1)
    assert restored.value == "done"


def test_wait_for_and_to_promise_on_the_async_engine() -> None:
    """wait_for waits for a state or predicate (TimeoutError otherwise); to_promise gives the output."""
    chart = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"after": {"20": "b"}},
            "b": {"after": {"20": "c"}},
            "c": {"type": "final", "output": {"ok": 1}},
        },
    }

    async def main() -> tuple[Any, ...]:
        interp = await Interpreter(create_machine(chart), clock=WallClock()).start()
        await interp.wait_for("b", timeout=2)
        reached_b = interp.value
        output = await interp.to_promise(timeout=2)
        stuck = await Interpreter(
            create_machine({"id": "s", "initial": "x", "states": {"x": {}, "y": {}}})
        ).start()
        with pytest.raises(TimeoutError):
            await stuck.wait_for(lambda i: i.matches("y"), timeout=0.05)
        await stuck.stop()
        with pytest.raises(TimeoutError, match="stopped"):
            await stuck.to_promise(timeout=1)
        return reached_b, output

    assert asyncio.run(main()) == ("b", {"ok": 1})
