"""Properties over random charts and random event sequences."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import count, note, player_logic
from tests.strategies import chart_logic, charts, clock_steps, events
from xsm_celery import MachineLogic, SimulatedClock, create_machine
from xsm_celery.engine.state import state_value

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    """Generated charts raise from actions on purpose; keep those logs out of the output."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def assert_legal(interp: Any) -> None:
    """The configuration is one a statechart can be in, and the views agree with it."""
    config = interp.configuration
    machine = interp.machine
    assert machine.root in config
    for node in config:
        if node.parent is not None:
            assert node.parent in config, f"{node.id} active without its parent"
        active = [c for c in node.children if c in config]
        if node.type == "compound":
            assert len(active) == 1, f"{node.id} has {len(active)} active children"
        elif node.type == "parallel":
            assert len(active) == len(node.children), f"{node.id} lacks a region"
    leaves = {n.id for n in config if not n.children}
    assert interp.current_state_ids == leaves
    assert all(interp.matches(state_id) for state_id in leaves)
    root_children = [c for c in machine.root.children if c in config]
    if machine.root.type != "parallel" and not root_children[0].children:
        assert interp.value == root_children[0].key
    else:
        assert interp.value == state_value(machine.root, config)
    if interp.status == "done":
        assert interp.pending_timers() == []


@PROPERTY
@given(chart=charts(), sequence=events())
def test_random_events_on_random_charts_keep_a_legal_configuration(
    chart: dict[str, Any], sequence: list[tuple[str, bool]]
) -> None:
    """Any event sequence leaves one active leaf per active region and never raises."""
    machine = create_machine(chart, logic=chart_logic())
    interp = Interp(machine, clock=SimulatedClock()).start()
    assert_legal(interp)
    for event_type, coin in sequence:
        interp.send(event_type, coin=coin)
        assert interp.status in ("running", "done")
        assert_legal(interp)


@PROPERTY
@given(chart=charts(), sequence=events(), steps=clock_steps())
def test_random_events_and_timers_keep_a_legal_configuration(
    chart: dict[str, Any], sequence: list[tuple[str, bool]], steps: list[int]
) -> None:
    """Interleaving clock increments with events keeps the configuration legal."""
    clock = SimulatedClock()
    interp = Interp(create_machine(chart, logic=chart_logic()), clock=clock).start()
    for (event_type, coin), ms in zip(sequence, steps, strict=False):
        interp.send(event_type, coin=coin)
        clock.increment(ms)
        assert_legal(interp)
        for timer in interp.pending_timers():
            assert timer.node in interp.configuration


@PROPERTY
@given(chart=charts(), before=events(), after=events())
def test_snapshot_restore_is_invisible(
    chart: dict[str, Any], before: list[tuple[str, bool]], after: list[tuple[str, bool]]
) -> None:
    """Restoring a snapshot mid-sequence ends in the same states and context as not doing so."""
    machine = create_machine(chart, logic=chart_logic())
    clock = SimulatedClock(wall_start=1_000.0)
    straight = Interp(machine, clock=clock).start()
    for event_type, coin in before:
        straight.send(event_type, coin=coin)
    restored = Interp.from_snapshot(
        straight.get_snapshot(), machine, clock=SimulatedClock(wall_start=1_000.0)
    )
    for event_type, coin in after:
        straight.send(event_type, coin=coin)
        restored.send(event_type, coin=coin)
    assert restored.current_state_ids == straight.current_state_ids
    assert restored.context == straight.context
    assert restored.status == straight.status
    assert (
        json.loads(restored.get_snapshot())["deadlines"]
        == json.loads(straight.get_snapshot())["deadlines"]
    )


FIXTURES: dict[str, tuple[MachineLogic, tuple[str, ...]]] = {
    "toggle": (MachineLogic(actions={"count": count}), ("FLIP", "OTHER")),
    "player": (
        player_logic(),
        ("PLAY", "PAUSE", "STOP", "VOLUME", "RESTART", "SEEK", "SEEKED", "TICK", "POWER"),
    ),
    "editor": (MachineLogic(), ("TOGGLE_BOLD", "BULLETS", "NUMBERS", "NONE", "EDIT", "SAVE")),
    "upload": (MachineLogic(actions={"note": note}), ("FILE_OK", "THUMB_OK", "BOTH_OK", "CANCEL")),
}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(FIXTURES)), data=st.data())
def test_random_events_on_fixture_charts(name: str, data: st.DataObject) -> None:
    """The fixture charts stay legal under any sequence of their own events."""
    logic, vocabulary = FIXTURES[name]
    interp = Interp(create_machine(load(name), logic=logic)).start()
    for event_type, _ in data.draw(events(vocabulary)):
        payload = {"level": 1} if event_type == "VOLUME" else {}
        interp.send(event_type, **payload)
        assert_legal(interp)
