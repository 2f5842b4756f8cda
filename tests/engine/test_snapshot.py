"""Snapshots: JSON round trips, pending timers across processes, refusal of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from xsm_celery import (
    MachineLogic,
    SimulatedClock,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMismatchError,
    SnapshotTooLargeError,
    create_machine,
)
from xsm_celery.engine import WallClock

WALL = 1_700_000_000.0


def retry_logic(outcomes: list[Any]) -> MachineLogic:
    """Retry-chart logic whose service raises or returns ``outcomes`` in order."""

    def work(i: Any, ctx: Any, e: Any) -> Any:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return MachineLogic(
        actions={
            "retryBump": lambda i, c, e, a: c.__setitem__("attempt", c["attempt"] + 1),
            "retryReset": lambda i, c, e, a: c.__setitem__("attempt", 0),
        },
        guards={"retryCanRetry": lambda c, e: c["attempt"] < 3},
        services={"work": work},
        delays={"retryDelay": 1000},
    )


def resting(outcomes: list[Any]) -> tuple[Any, SimulatedClock]:
    """A retry machine waiting in 'retrying' after one failure, on a clock at wall WALL."""
    clock = SimulatedClock(wall_start=WALL)
    machine = create_machine(load("retry"), logic=retry_logic(outcomes))
    interp = Interp(machine, clock=clock).start()
    assert interp.current_state_ids == {"job.retrying"}
    return interp, clock


def test_snapshot_is_json_with_the_documented_fields() -> None:
    """get_snapshot() is a JSON object with state, context, timers and the machine hash."""
    interp, clock = resting([ConnectionError("x")])
    clock.increment(250)
    data = json.loads(interp.get_snapshot())
    assert data["machine_id"] == "job"
    assert data["machine_hash"] == interp.machine.structure_hash
    assert data["status"] == "running"
    assert data["state_ids"] == ["job.retrying"]
    assert data["value"] == "retrying"
    assert data["context"] == {"attempt": 1}
    assert data["taken_at"] == pytest.approx(WALL + 0.25)
    [deadline] = data["deadlines"]
    assert deadline["state_id"] == "job.retrying"
    assert deadline["key"] == "retryDelay"
    assert deadline["event_type"] == "after.retryDelay.job.retrying"
    assert deadline["delay_ms"] == 1000
    assert deadline["due_at_wall"] == pytest.approx(WALL + 1.0)


def test_restore_resumes_with_the_pending_timer() -> None:
    """A restored interpreter fires the saved timer at its original wall-clock due time."""
    interp, clock = resting([ConnectionError("x"), "ok"])
    clock.increment(400)
    saved = interp.get_snapshot()
    machine = interp.machine
    interp.stop()
    clock2 = SimulatedClock(wall_start=WALL + 0.4)
    restored = Interp.from_snapshot(saved, machine, clock=clock2)
    assert restored.status == "running"
    assert restored.context == {"attempt": 1}
    clock2.increment(599)
    assert restored.matches("job.retrying")
    clock2.increment(1)
    assert restored.matches("job.done")
    assert restored.context == {"attempt": 0}


def test_overdue_timer_fires_on_the_first_tick_after_restore() -> None:
    """If the process was down past the due time, the timer fires at the next tick."""
    interp, _ = resting([ConnectionError("x"), "ok"])
    saved = interp.get_snapshot()
    later = SimulatedClock(wall_start=WALL + 60)
    restored = Interp.from_snapshot(saved, interp.machine, clock=later)
    later.increment(0)
    assert restored.matches("job.done")


def test_restore_on_a_wall_clock_fires_on_tick() -> None:
    """Restored on a WallClock, an overdue timer fires when tick() is called."""
    interp, _ = resting([ConnectionError("x"), "ok"])
    restored = Interp.from_snapshot(interp.get_snapshot(), interp.machine, clock=WallClock())
    restored.tick()
    assert restored.matches("job.done")


def test_restore_in_another_process(tmp_path: Path) -> None:
    """A snapshot written here restores in a fresh Python process with its timer pending."""
    interp, clock = resting([ConnectionError("x")])
    clock.increment(100)
    snap = tmp_path / "snap.json"
    snap.write_text(interp.get_snapshot())
    root = Path(__file__).resolve().parents[2]
    cls_name = "Interpreter" if Interp.is_async else "SyncInterpreter"
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(root)!r})
        from tests.charts import load
        from tests.engine.test_snapshot import retry_logic, WALL
        from xsm_celery import SimulatedClock, create_machine, {cls_name}
        machine = create_machine(load("retry"), logic=retry_logic(["ok"]))
        clock = SimulatedClock(wall_start=WALL + 0.1)
        interp = {cls_name}.from_snapshot(open({str(snap)!r}).read(), machine, clock=clock)
        assert interp.current_state_ids == {{"job.retrying"}}
        clock.increment(899)
        assert interp.current_state_ids == {{"job.retrying"}}
        clock.increment(1)
        print(sorted(interp.current_state_ids), interp.context)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['job.done'] {'attempt': 0}"


def test_restore_does_not_rerun_entry_actions_or_services() -> None:
    """Restoring is not entering: no entry action and no service runs."""
    calls: list[str] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"entry": "hello", "invoke": {"src": "work"}}},
    }
    logic = MachineLogic(
        actions={"hello": lambda *a: calls.append("entry")},
        services={"work": lambda *a: calls.append("service")},
    )
    machine = create_machine(config, logic=logic)
    saved = Interp(machine).start().get_snapshot()
    calls.clear()
    Interp.from_snapshot(saved, machine)
    assert calls == []
    Interp.from_snapshot(saved, machine, restart_services=True)
    assert calls == ["service"]


def test_snapshot_round_trip_of_parallel_and_done_states() -> None:
    """Parallel configurations and a done machine restore as they were."""
    machine = create_machine(load("editor"))
    interp = Interp(machine).start()
    interp.send("NUMBERS")
    again = Interp.from_snapshot(interp.get_snapshot(), machine)
    assert again.value == interp.value
    again.send("TOGGLE_BOLD")
    assert again.value["bold"] == "on"
    upload = create_machine(load("upload"), logic=MachineLogic(actions={"note": lambda *a: None}))
    finished = Interp(upload).start()
    finished.send("CANCEL")
    done = Interp.from_snapshot(finished.get_snapshot(), upload)
    assert (done.status, done.output, done.value) == ("done", {"ok": False}, "cancelled")


def test_snapshot_accepts_a_parsed_dict_and_bytes() -> None:
    """from_snapshot takes the JSON string, its bytes, or the parsed dict."""
    machine = create_machine(load("editor"))
    saved = Interp(machine).start().get_snapshot()
    for form in (saved, saved.encode(), json.loads(saved)):
        assert Interp.from_snapshot(form, machine).status == "running"


def test_unstarted_snapshot_restores_unstarted() -> None:
    """A snapshot of an interpreter that never started restores one that can start."""
    machine = create_machine(load("editor"))
    restored = Interp.from_snapshot(Interp(machine).get_snapshot(), machine)
    assert restored.status == "not_started"
    assert restored.start().value["bold"] == "off"


def test_changed_structure_is_refused_unless_allowed() -> None:
    """A snapshot of an older chart structure raises SnapshotMismatchError by default."""
    old = create_machine(load("editor"))
    saved = Interp(old).start().get_snapshot()
    changed = load("editor")
    changed["states"]["save"]["states"]["dirty"]["on"]["DISCARD"] = "clean"
    new = create_machine(changed)
    with pytest.raises(SnapshotMismatchError, match="verify_machine_hash=False"):
        Interp.from_snapshot(saved, new)
    assert Interp.from_snapshot(saved, new, verify_machine_hash=False).status == "running"
    allowed = Interp.from_snapshot(saved, new, expected_machine_hash=old.structure_hash)
    assert allowed.status == "running"


def test_snapshot_of_another_machine_is_refused() -> None:
    """Restoring a snapshot against a machine with another id is a mismatch."""
    saved = Interp(create_machine(load("editor"))).start().get_snapshot()
    with pytest.raises(SnapshotMismatchError, match="not 'toggle'"):
        Interp.from_snapshot(saved, create_machine(load("toggle")), verify_machine_hash=False)


def test_oversized_snapshot_is_refused_before_parsing() -> None:
    """A snapshot over the byte cap raises SnapshotTooLargeError, even if it is not JSON."""
    machine = create_machine(load("editor"))
    with pytest.raises(SnapshotTooLargeError, match="over the 1048576-byte cap"):
        Interp.from_snapshot("x" * (1024 * 1024 + 1), machine)
    with pytest.raises(SnapshotTooLargeError):
        Interp.from_snapshot("é" * 600_000, machine)
    saved = Interp(machine).start().get_snapshot()
    with pytest.raises(SnapshotTooLargeError):
        Interp.from_snapshot(saved, machine, max_bytes=10)


def mutate(saved: str, change: Any) -> str:
    """``saved`` with ``change(data)`` applied."""
    data = json.loads(saved)
    change(data)
    return json.dumps(data)


def _drop(key: str) -> Any:
    return lambda d: d.pop(key)


def _set(key: str, value: Any) -> Any:
    return lambda d: d.__setitem__(key, value)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda s: s[: len(s) // 2],
        lambda s: "[]",
        lambda s: "null",
        lambda s: "\xff\xfe",
        lambda s: mutate(s, _drop("state_ids")),
        lambda s: mutate(s, _drop("context")),
        lambda s: mutate(s, _drop("machine_id")),
        lambda s: mutate(s, _drop("status")),
        lambda s: mutate(s, _set("status", "flying")),
        lambda s: mutate(s, _set("context", [1])),
        lambda s: mutate(s, _set("state_ids", "job.retrying")),
        lambda s: mutate(s, _set("state_ids", ["job.nowhere"])),
        lambda s: mutate(s, _set("state_ids", ["job"])),
        lambda s: mutate(s, _set("state_ids", [1])),
        lambda s: mutate(s, _set("state_ids", [])),
        lambda s: mutate(s, _set("state_ids", ["job.retrying", "job.done"])),
        lambda s: mutate(s, _set("deadlines", {})),
        lambda s: mutate(s, _set("deadlines", [1])),
        lambda s: mutate(
            s, _set("deadlines", [{"state_id": "job.done", "key": "x", "due_at_wall": 1}])
        ),
        lambda s: mutate(s, _set("deadlines", [{"state_id": "job.retrying", "key": "retryDelay"}])),
        lambda s: mutate(
            s,
            _set(
                "deadlines",
                [{"state_id": "job.retrying", "key": "retryDelay", "due_at_wall": "soon"}],
            ),
        ),
    ],
)
def test_corrupt_snapshots_raise_snapshot_corrupt_error(corrupt: Any) -> None:
    """Broken JSON, missing or ill-typed fields and unknown states are SnapshotCorruptError."""
    interp, _ = resting([ConnectionError("x")])
    with pytest.raises(SnapshotCorruptError):
        Interp.from_snapshot(corrupt(interp.get_snapshot()), interp.machine)


def test_snapshot_of_a_non_json_context_is_a_snapshot_error() -> None:
    """A context value JSON cannot hold makes get_snapshot raise SnapshotError, not TypeError."""
    interp = Interp(create_machine(load("editor"))).start()
    interp.context["when"] = object()
    with pytest.raises(SnapshotError, match="JSON"):
        interp.get_snapshot()


def test_not_a_snapshot_type_is_corrupt() -> None:
    """Passing something that is neither text nor a dict is a corrupt snapshot."""
    with pytest.raises(SnapshotCorruptError):
        Interp.from_snapshot(42, create_machine(load("editor")))  # type: ignore[arg-type]
