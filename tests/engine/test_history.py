"""History states: shallow and deep, default targets, parallel regions, snapshots."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import note
from xsm_celery import MachineLogic, SnapshotCorruptError, create_machine


def player(kind: str = "shallow", **hist: Any) -> dict[str, Any]:
    """'on' holds 'a' and 'b' (with b1/b2); OFF leaves, BACK returns through on.h."""
    return {
        "id": "m",
        "initial": "on",
        "states": {
            "on": {
                "initial": "a",
                "on": {"OFF": "off"},
                "states": {
                    "a": {"on": {"NEXT": "b"}},
                    "b": {
                        "initial": "b1",
                        "entry": {"type": "note", "params": {"text": "enter b"}},
                        "states": {"b1": {"on": {"NEXT": "b2"}}, "b2": {}},
                    },
                    "h": {"type": "history", "history": kind, **hist},
                },
            },
            "off": {"on": {"BACK": "on.h", "RESET": "on"}},
        },
    }


def started(config: dict[str, Any]) -> Any:
    """A started interpreter with the ``note`` action."""
    return Interp(create_machine(config, logic=MachineLogic(actions={"note": note}))).start()


def test_shallow_history_returns_to_the_last_child_entered_by_default() -> None:
    """Shallow history restores the active child of its parent, entering that child's initial."""
    interp = started(player("shallow"))
    for event in ("NEXT", "NEXT", "OFF", "BACK"):
        interp.send(event)
    assert interp.current_state_ids == {"m.on.b.b1"}
    assert interp.context["log"] == ["enter b", "enter b"]


def test_deep_history_returns_to_the_last_leaf() -> None:
    """Deep history restores every active leaf below its parent."""
    interp = started(player("deep"))
    for event in ("NEXT", "NEXT", "OFF", "BACK"):
        interp.send(event)
    assert interp.current_state_ids == {"m.on.b.b2"}


def test_unvisited_history_takes_its_default_target_or_the_parents_initial() -> None:
    """Before its parent was ever exited, history enters its 'target', else the parent's initial."""
    config = player("deep", target="b")
    config["initial"] = "off"
    interp = started(config)
    interp.send("BACK")
    assert interp.current_state_ids == {"m.on.b.b1"}
    plain = player("deep")
    plain["initial"] = "off"
    interp = started(plain)
    interp.send("BACK")
    assert interp.current_state_ids == {"m.on.a"}


def test_plain_entry_ignores_history() -> None:
    """Targeting the parent itself, not its history state, enters the initial child."""
    interp = started(player("deep"))
    for event in ("NEXT", "NEXT", "OFF", "RESET"):
        interp.send(event)
    assert interp.current_state_ids == {"m.on.a"}


def test_history_is_recorded_on_every_exit() -> None:
    """Each exit overwrites what the history state remembers."""
    interp = started(player("deep"))
    for event in ("NEXT", "OFF", "BACK"):
        interp.send(event)
    assert interp.current_state_ids == {"m.on.b.b1"}
    for event in ("NEXT", "OFF", "BACK"):
        interp.send(event)
    assert interp.current_state_ids == {"m.on.b.b2"}


def regions(kind: str) -> dict[str, Any]:
    """A parallel state with two regions inside 'work', which has a history state."""
    return {
        "id": "m",
        "initial": "work",
        "states": {
            "work": {
                "initial": "p",
                "on": {"PAUSE": "paused"},
                "states": {
                    "p": {
                        "type": "parallel",
                        "states": {
                            "left": {
                                "initial": "l1",
                                "states": {
                                    "l1": {"on": {"L": "l2"}},
                                    "l2": {
                                        "initial": "x",
                                        "states": {"x": {"on": {"L": "y"}}, "y": {}},
                                    },
                                    "lh": {"type": "history", "history": "deep"},
                                },
                            },
                            "right": {
                                "initial": "r1",
                                "states": {"r1": {"on": {"R": "r2"}}, "r2": {}},
                            },
                        },
                    },
                    "h": {"type": "history", "history": kind},
                },
            },
            "paused": {"on": {"RESUME": "work.h", "LEFT_ONLY": "work.p.left.lh"}},
        },
    }


def test_deep_history_restores_every_parallel_region() -> None:
    """Deep history of a state holding a parallel state restores the leaf of each region."""
    interp = started(regions("deep"))
    for event in ("L", "L", "R", "PAUSE", "RESUME"):
        interp.send(event)
    assert interp.current_state_ids == {"m.work.p.left.l2.y", "m.work.p.right.r2"}


def test_shallow_history_above_a_parallel_state_enters_its_regions_by_default() -> None:
    """Shallow history remembers only the parallel state, so each region starts over."""
    interp = started(regions("shallow"))
    for event in ("L", "R", "PAUSE", "RESUME"):
        interp.send(event)
    assert interp.current_state_ids == {"m.work.p.left.l1", "m.work.p.right.r1"}


def test_history_inside_one_region_restores_it_and_defaults_the_other() -> None:
    """Targeting a region's own deep history restores that region; the sibling region starts over."""
    interp = started(regions("shallow"))
    for event in ("L", "L", "R", "PAUSE", "LEFT_ONLY"):
        interp.send(event)
    assert interp.current_state_ids == {"m.work.p.left.l2.y", "m.work.p.right.r1"}


def test_history_survives_a_snapshot_round_trip() -> None:
    """What history remembers is in the snapshot and used after restoring it."""
    machine = create_machine(player("deep"), logic=MachineLogic(actions={"note": note}))
    interp = Interp(machine).start()
    for event in ("NEXT", "NEXT", "OFF"):
        interp.send(event)
    saved = interp.get_snapshot()
    restored = Interp.from_snapshot(saved, machine)
    restored.send("BACK")
    assert restored.current_state_ids == {"m.on.b.b2"}


def test_history_restores_in_another_process(tmp_path: Path) -> None:
    """A snapshot with remembered history restores in a fresh process and returns to the leaf."""
    machine = create_machine(player("deep"), logic=MachineLogic(actions={"note": note}))
    interp = Interp(machine).start()
    for event in ("NEXT", "NEXT", "OFF"):
        interp.send(event)
    snap = tmp_path / "snap.json"
    snap.write_text(interp.get_snapshot())
    cls_name = "Interpreter" if Interp.is_async else "SyncInterpreter"
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.engine.test_history import player
        from tests.engine.helpers import note
        from xsm_celery import MachineLogic, create_machine, {cls_name}
        machine = create_machine(player("deep"), logic=MachineLogic(actions={{"note": note}}))
        interp = {cls_name}.from_snapshot(open({str(snap)!r}).read(), machine)
        interp.send("BACK")
        print(sorted(interp.current_state_ids))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['m.on.b.b2']"


@pytest.mark.parametrize(
    "history",
    [
        {"m.nope": ["m.on.a"]},
        {"m.on.a": ["m.on.a"]},
        {"m.on.h": ["m.off"]},
        {"m.on.h": "m.on.a"},
        [],
    ],
)
def test_a_snapshot_with_bad_history_is_refused(history: Any) -> None:
    """History naming no history state, or states outside its parent, is a corrupt snapshot."""
    machine = create_machine(player("deep"), logic=MachineLogic(actions={"note": note}))
    data = Interp(machine).start().snapshot()
    data = {**data, "history": history}
    with pytest.raises(SnapshotCorruptError):
        Interp.from_snapshot(data, machine)


def test_history_states_are_never_active_or_in_the_value() -> None:
    """A history state is a pointer: it never appears in the configuration or the value."""
    interp = started(player("deep"))
    assert interp.matches("on.h") is False
    assert interp.value == {"on": "a"}
    assert all(node.type != "history" for node in interp.configuration)
