"""Snapshots of 0.11.0 restore here, and this engine's restore in another process.

Snapshots written by xstate-statemachine 0.11.0 restore here, on both engines.

The fixtures in ``fixtures/v011/`` were taken by 0.11.0 itself (``fixtures/generate_v011.py``
writes them); each holds the chart, the events 0.11.0 was sent, what it reported afterwards
and the snapshot it wrote. A restore here must land in the same place and carry on from it:
timers at their saved due time, history, delayed events, children, queued events.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.engine import roundtrip_cases
from tests.engine.drivers import Interp
from xsm_celery import (
    MachineLogic,
    SimulatedClock,
    SnapshotCorruptError,
    SnapshotMismatchError,
    create_machine,
)
from xsm_celery.engine import Machine

FIXTURES = Path(__file__).parent / "fixtures" / "v011"
CASES = sorted(path.stem for path in FIXTURES.glob("*.json"))


def _case(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def _machine(case: dict[str, Any]) -> Machine:
    children = {name: create_machine(chart) for name, chart in case["children"].items()}
    return create_machine(case["chart"], MachineLogic(services=children))


def _taken_at(case: dict[str, Any]) -> float:
    snapshot = json.loads(case["snapshot"])
    if "key" in snapshot:
        snapshot = json.loads(snapshot["snapshot"])
    return float(snapshot["taken_at"])


def _restore(name: str) -> tuple[Any, SimulatedClock, dict[str, Any]]:
    """Restore a fixture on a clock whose wall time is the moment 0.11.0 took it."""
    case = _case(name)
    clock = SimulatedClock(wall_start=_taken_at(case))
    interp = Interp.from_snapshot(case["snapshot"], _machine(case), clock=clock)
    return interp, clock, case


def test_every_case_was_generated() -> None:
    """The fixture set covers each layout feature the tests below rely on."""
    assert {"toggle_running", "nested_with_timer", "delayed_raise", "child_machine"} <= set(CASES)
    assert all(_case(name)["library"] == "xstate-statemachine 0.11.0" for name in CASES)


@pytest.mark.parametrize("name", CASES)
def test_restores_where_v011_was(name: str) -> None:
    """Status, active states, context and output are the ones 0.11.0 reported."""
    interp, _, case = _restore(name)
    expect = case["expect"]
    status = {"uninitialized": "not_started"}.get(expect["status"], expect["status"])
    assert interp.status == status
    if status != "not_started":
        assert sorted(interp.current_state_ids) == expect["state_ids"]
    assert interp.context == expect["context"]
    assert interp.output == expect["output"]


def test_after_timer_fires_at_its_saved_due_time() -> None:
    """A 5 s ``after`` armed before the snapshot fires 5 s after it was armed, not later."""
    interp, clock, _ = _restore("nested_with_timer")
    clock.increment(4_900)
    assert interp.current_state_ids == {"job.work.parse.body"}
    clock.increment(200)
    assert interp.current_state_ids == {"job.idle"}


def test_parallel_region_timer_carries_over() -> None:
    """The fan region's 2.5 s timer moves it on; the light region keeps its state."""
    interp, clock, _ = _restore("parallel_with_timer")
    clock.increment(2_600)
    assert interp.current_state_ids == {"desk.light.bright", "desk.fan.fast"}


def test_deep_history_is_remembered() -> None:
    """Resuming through deep history re-enters the leaf 0.11.0 had recorded."""
    interp, _, _ = _restore("nested_history")
    interp.send("RESUME")
    assert interp.current_state_ids == {"job.work.parse.body"}


def test_delayed_raise_keeps_its_due_time_and_send_id() -> None:
    """0.11.0's scheduled self-send is a delayed event here: due on time, cancellable by id."""
    interp, clock, _ = _restore("delayed_raise")
    assert [t.send_id for t in interp._delayed] == ["ping"]
    clock.increment(3_900)
    assert interp.current_state_ids == {"pinger.waiting"}
    clock.increment(200)
    assert interp.current_state_ids == {"pinger.pinged"}


def test_child_machine_is_restored_under_its_invoke_id() -> None:
    """0.11.0's ``boss:kid`` actor is the child ``kid`` here, in its saved state, and runs."""
    interp, _, _ = _restore("child_machine")
    child = interp.children["kid"].child
    assert child.current_state_ids == {"kid.small"}
    assert child.context == {"age": 1}
    interp.send_to("kid", "GROW")
    assert child.status == "done"


def test_pending_events_run_before_anything_newer() -> None:
    """Events 0.11.0's async engine had accepted but not processed run on the next tick."""
    interp, _, case = _restore("async_nested")
    assert interp.current_state_ids == {"job.idle"}
    interp.tick()
    assert sorted(interp.current_state_ids) == case["expect_settled"]["state_ids"]


def test_file_store_record_is_unwrapped() -> None:
    """A record 0.11.0's FileStore wrote (``format``, ``key``, ``snapshot``) restores as well."""
    interp, _, case = _restore("file_store_record")
    assert json.loads(case["snapshot"])["key"] == "order-1"
    assert sorted(interp.current_state_ids) == case["expect"]["state_ids"]
    interp.send("PAUSE")
    assert interp.current_state_ids == {"job.paused"}


def test_not_started_snapshot_can_start() -> None:
    """An ``uninitialized`` 0.11.0 snapshot is a machine not yet started, with its context."""
    interp, _, _ = _restore("toggle_not_started")
    interp.start()
    assert interp.current_state_ids == {"toggle.off"}
    assert interp.context["note"] == "héllo"


def test_restored_machine_takes_snapshots_of_its_own_layout() -> None:
    """Once restored, the machine writes this engine's layout, which restores again."""
    interp, _, case = _restore("toggle_running")
    again = Interp.from_snapshot(interp.get_snapshot(), _machine(case), clock=SimulatedClock())
    assert json.loads(again.get_snapshot())["format"] == 1
    again.send("FLIP")
    assert again.current_state_ids == {"toggle.off"}


def test_another_machine_is_refused() -> None:
    """A 0.11.0 snapshot of one machine does not restore into another."""
    case = _case("toggle_running")
    other = create_machine({**case["chart"], "id": "other"})
    with pytest.raises(SnapshotMismatchError):
        Interp.from_snapshot(case["snapshot"], other, clock=SimulatedClock())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 5}, "newer than 0.11.0"),
        ({"version": "4"}, "must be an integer"),
        ({"state_ids": ["toggle.nowhere"], "configuration": ["toggle"]}, "not a leaf"),
        ({"scheduled_sends": [{"kind": "event", "type": "X"}]}, "remaining_ms"),
        ({"actors": {"toggle:kid": {"src": "kid"}}}, "malformed"),
        ({"history": {"toggle.nowhere": []}}, "not a state"),
    ],
)
def test_damaged_v011_snapshots_are_refused(change: dict[str, Any], message: str) -> None:
    """A damaged 0.11.0 snapshot raises SnapshotCorruptError naming what is wrong."""
    case = _case("toggle_running")
    snapshot = {**json.loads(case["snapshot"]), **change}
    with pytest.raises(SnapshotCorruptError, match=message):
        Interp.from_snapshot(snapshot, _machine(case), clock=SimulatedClock())


def test_store_record_with_bad_snapshot_is_refused() -> None:
    """A store record whose inner snapshot is not JSON is corrupt, not a crash."""
    case = _case("file_store_record")
    record = {**json.loads(case["snapshot"]), "snapshot": "{not json"}
    with pytest.raises(SnapshotCorruptError, match="not valid JSON"):
        Interp.from_snapshot(record, _machine(case), clock=SimulatedClock())


def test_version_0_layout_restores_into_the_given_machine() -> None:
    """0.11.0 reads its oldest layout (no version, no machine id) unchecked; so does this one."""
    case = _case("toggle_running")
    legacy = {"status": "running", "context": {"flips": 1}, "state_ids": ["toggle.on"]}
    interp = Interp.from_snapshot(legacy, _machine(case), clock=SimulatedClock())
    assert interp.current_state_ids == {"toggle.on"}
    interp.send("FLIP")
    assert interp.current_state_ids == {"toggle.off"}


def _drive(name: str) -> tuple[Any, SimulatedClock]:
    events = roundtrip_cases.CASES[name]
    clock = SimulatedClock(wall_start=roundtrip_cases.WALL)
    interp = Interp(roundtrip_cases.machine(name), clock=clock)
    if events is None:
        return interp, clock
    interp.start()
    for event in events:
        if event == "stop":
            interp.stop()
        else:
            interp.send(event)
    return interp, clock


@pytest.mark.slow
def test_round_trip_in_another_process() -> None:
    """Every snapshot this engine writes restores in a fresh process, on both engines.

    The other process must see what this one sees: state, context, output, timers and
    delayed events with their time left, history, children; and after the clock moves on,
    the same again.
    """
    snapshots: dict[str, str] = {}
    expected: dict[str, list[dict[str, Any]]] = {}
    for name in roundtrip_cases.CASES:
        interp, clock = _drive(name)
        snapshots[name] = interp.get_snapshot()
        snapshots[f"{name}:persisted"] = json.dumps(interp.get_persisted_snapshot())
        seen = roundtrip_cases.observe(interp)
        clock.increment(roundtrip_cases.LATER_MS)
        expected[name] = expected[f"{name}:persisted"] = [seen, roundtrip_cases.observe(interp)]
    assert len({json.dumps(e, sort_keys=True) for e in expected.values()}) >= 7
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "tests.engine.roundtrip_cases"],
        input=json.dumps(snapshots),
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for kind in ("sync", "async"):
        for key, observed in report[kind].items():
            assert observed == json.loads(json.dumps(expected[key])), (kind, key)
