"""Child machines as services: input, events both ways, onDone output, onError, stop on exit,
spawned by id, snapshots (in this and another process), plugins per seed 000."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import MachineLogic, SimulatedClock, create_machine
from xsm_celery.actions import assign, send_parent, send_to, spawn_child, stop_child
from xsm_celery.patterns import DeadLetterPlugin, DeadLetterStore
from xsm_celery.plugins import register_global, unregister_global


def child_machine() -> Any:
    """A child that starts from input, PINGs its parent on entry, and finishes on FINISH."""
    return create_machine(
        {
            "id": "worker",
            "initial": "busy",
            "context": lambda a: {"job": (a["input"] or {}).get("job"), "pings": 0},
            "states": {
                "busy": {
                    "entry": send_parent({"type": "PING", "from": "worker"}),
                    "on": {
                        "POKE": {"actions": assign({"pings": lambda a: a["context"]["pings"] + 1})},
                        "FINISH": "done",
                        "CRASH": {"actions": "crash"},
                    },
                    "after": {"1000": "timedOut"},
                },
                "done": {"type": "final", "output": {"ok": True}},
                "timedOut": {"type": "final", "output": {"ok": False}, "tags": ["dead-letter"]},
            },
        },
        logic=MachineLogic(actions={"crash": lambda i, c, e, a: None}),
    )


def parent_chart(**invoke: Any) -> dict[str, Any]:
    """'idle' --GO--> 'running' invokes the child 'kid'; onDone keeps the output."""
    return {
        "id": "boss",
        "initial": "idle",
        "context": {"pings": []},
        "states": {
            "idle": {"on": {"GO": "running"}},
            "running": {
                "invoke": {
                    "src": "worker",
                    "id": "kid",
                    "input": {"job": 7},
                    "onDone": {
                        "target": "finished",
                        "actions": assign({"out": lambda a: a["event"].data}),
                    },
                    "onError": {
                        "target": "failed",
                        "actions": assign({"err": lambda a: str(a["event"].data)}),
                    },
                    **invoke,
                },
                "on": {
                    "PING": {
                        "actions": assign(
                            {
                                "pings": lambda a: [
                                    *a["context"]["pings"],
                                    a["event"].payload["from"],
                                ]
                            }
                        )
                    },
                    "POKE_KID": {"actions": send_to("kid", "POKE")},
                    "FINISH_KID": {"actions": send_to("kid", "FINISH")},
                    "LEAVE": "idle",
                },
            },
            "finished": {},
            "failed": {},
        },
    }


def boss(child: Any = None, clock: Any = None) -> Any:
    """A started parent with the child machine as its 'worker' service."""
    machine = create_machine(
        parent_chart(), logic=MachineLogic(services={"worker": child or child_machine()})
    )
    return Interp(machine, clock=clock).start()


def test_child_gets_its_own_context_from_input_and_talks_to_its_parent() -> None:
    """The child builds its context from the invoke's input; sendParent and sendTo carry events."""
    interp = boss()
    interp.send("GO")
    kid = interp.children["kid"].child
    assert kid.context == {"job": 7, "pings": 0}
    assert interp.context["pings"] == ["worker"]
    interp.send("POKE_KID")
    interp.send("POKE_KID")
    assert kid.context["pings"] == 2
    assert kid.id == "kid"


def test_child_reaching_final_sends_on_done_with_its_output() -> None:
    """A child's final output is onDone's event.data."""
    interp = boss()
    interp.send("GO")
    interp.send("FINISH_KID")
    assert interp.value == "finished"
    assert interp.context["out"] == {"ok": True}
    assert interp.children == {}


def test_child_timers_run_on_the_parents_clock() -> None:
    """A child's 'after' timer fires on the parent's clock and its final output reaches onDone."""
    clock = SimulatedClock()
    interp = boss(clock=clock)
    interp.send("GO")
    clock.increment(1000)
    assert interp.value == "finished"
    assert interp.context["out"] == {"ok": False}


def test_leaving_the_invoking_state_stops_the_child() -> None:
    """The child is stopped when the invoking state exits; its timers no longer fire."""
    clock = SimulatedClock()
    interp = boss(clock=clock)
    interp.send("GO")
    kid = interp.children["kid"].child
    interp.send("LEAVE")
    assert kid.status == "stopped"
    clock.increment(5000)
    assert interp.value == "idle"
    assert "out" not in interp.context


def test_a_child_that_fails_to_start_goes_to_on_error() -> None:
    """A child whose start raises (here a missing entry action) is onError with the error."""
    broken = create_machine({"id": "broken", "initial": "a", "states": {"a": {"entry": "missing"}}})
    interp = boss(child=broken)
    interp.send("GO")
    assert interp.value == "failed"
    assert "missing" in interp.context["err"]


def test_a_child_reaching_final_while_its_parent_exits_in_the_same_step() -> None:
    """An exit action that finishes the child: the state is gone, so onDone does not fire."""
    chart = parent_chart()
    chart["states"]["running"]["exit"] = send_to("kid", "FINISH")
    machine = create_machine(chart, logic=MachineLogic(services={"worker": child_machine()}))
    interp = Interp(machine).start()
    interp.send("GO")
    kid = interp.children["kid"].child
    interp.send("LEAVE")
    assert interp.value == "idle"
    assert kid.status == "done"
    assert "out" not in interp.context
    assert interp.children == {}


def test_spawned_children_by_id_and_stop_child() -> None:
    """spawnChild starts a machine under an id; stopChild stops it; a finished one reports back."""
    chart = {
        "id": "boss",
        "initial": "a",
        "context": {"pings": []},
        "states": {
            "a": {
                "on": {
                    "SPAWN": {"actions": spawn_child("worker", actor_id="w1", input={"job": 1})},
                    "KILL": {"actions": stop_child("w1")},
                    "PING": {"actions": assign({"pings": lambda a: [*a["context"]["pings"], "w"]})},
                    "done.invoke.w1": "b",
                }
            },
            "b": {},
        },
    }
    machine = create_machine(chart, logic=MachineLogic(services={"worker": child_machine()}))
    interp = Interp(machine).start()
    interp.send("SPAWN")
    kid = interp.children["w1"].child
    assert kid.context["job"] == 1
    interp.send("KILL")
    assert kid.status == "stopped"
    assert interp.children == {}
    interp.send("SPAWN")
    interp.send_to("w1", "FINISH")
    assert interp.value == "b"


def test_a_spawned_child_that_raises_is_an_error_event() -> None:
    """A spawned child whose step raises is stopped and reported as error.platform.<id>."""
    crashing = create_machine(
        {
            "id": "c",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"guard": "nope", "target": "a"}}}},
        }
    )
    chart = {
        "id": "boss",
        "initial": "a",
        "states": {
            "a": {
                "on": {
                    "SPAWN": {"actions": spawn_child("crashy", actor_id="c1")},
                    "POKE": {"actions": send_to("c1", "GO")},
                    "error.platform.c1": "failed",
                }
            },
            "failed": {},
        },
    }
    interp = Interp(
        create_machine(chart, logic=MachineLogic(services={"crashy": crashing}))
    ).start()
    interp.send("SPAWN")
    interp.send("POKE")
    assert interp.value == "failed"
    assert interp.children == {}


def test_children_are_saved_and_restored_with_the_parents_snapshot() -> None:
    """A running child travels inside the parent's snapshot, timers and context included."""
    clock = SimulatedClock(wall_start=1000.0)
    machine = create_machine(
        parent_chart(), logic=MachineLogic(services={"worker": child_machine()})
    )
    interp = Interp(machine, clock=clock).start()
    interp.send("GO")
    interp.send("POKE_KID")
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, machine, clock=clock)
    kid = restored.children["kid"].child
    assert (kid.context["pings"], kid.parent) == (1, getattr(restored, "interp", restored))
    restored.send("POKE_KID")
    assert kid.context["pings"] == 2
    clock.increment(1000)
    assert restored.value == "finished"
    assert restored.context["out"] == {"ok": False}


def test_children_and_history_restore_in_another_process(tmp_path: Path) -> None:
    """A parent with a running child restores in a fresh process and the child finishes there."""
    machine = create_machine(
        parent_chart(), logic=MachineLogic(services={"worker": child_machine()})
    )
    interp = Interp(machine, clock=SimulatedClock(wall_start=1000.0)).start()
    interp.send("GO")
    interp.send("POKE_KID")
    snap = tmp_path / "snap.json"
    snap.write_text(interp.get_snapshot())
    cls_name = "Interpreter" if Interp.is_async else "SyncInterpreter"
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.engine.test_child_machines import child_machine, parent_chart
        from xsm_celery import MachineLogic, SimulatedClock, create_machine, {cls_name}
        machine = create_machine(parent_chart(), logic=MachineLogic(services={{"worker": child_machine()}}))
        interp = {cls_name}.from_snapshot(open({str(snap)!r}).read(), machine, clock=SimulatedClock(wall_start=1000.0))
        kid = interp.children["kid"].child
        print(kid.context["pings"])
        interp.send("FINISH_KID")
        print(interp.value, interp.context["out"])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["1", "finished {'ok': True}"]


def test_children_do_not_inherit_the_parents_plugins_but_get_global_ones() -> None:
    """A parent's plugin sees none of the child's events; a global plugin is attached to both."""
    parent_recorder = Recorder()
    global_recorder = Recorder()
    register_global(global_recorder)
    try:
        machine = create_machine(
            parent_chart(), logic=MachineLogic(services={"worker": child_machine()})
        )
        interp = Interp(machine).use(parent_recorder).start()
        interp.send("GO")
        interp.send("POKE_KID")
    finally:
        unregister_global(global_recorder)
    assert "POKE" not in parent_recorder.of("on_event_received")
    assert "POKE" in global_recorder.of("on_event_received")


def test_dead_letter_plugin_on_a_child_records_the_actor_id() -> None:
    """Attached to the child, the dead-letter plugin writes one record whose machine_id is the actor id."""
    store = DeadLetterStore()
    clock = SimulatedClock()
    interp = boss(clock=clock)
    interp.send("GO")
    interp.children["kid"].child.use(DeadLetterPlugin(store))
    clock.increment(1000)
    records = store.all()
    assert [r.machine_id for r in records] == ["kid"]
    assert interp.value == "finished"


@pytest.mark.parametrize(
    "field",
    [
        {"kid": {"src": "worker"}},
        {"kid": {"src": "nope", "owner": "boss.running", "snapshot": {}}},
        [],
    ],
)
def test_a_snapshot_with_a_bad_child_is_refused(field: Any) -> None:
    """Child entries that are malformed, name no machine or no active owner are corrupt."""
    from xsm_celery import SnapshotCorruptError

    machine = create_machine(
        parent_chart(), logic=MachineLogic(services={"worker": child_machine()})
    )
    interp = Interp(machine).start()
    interp.send("GO")
    data = {**interp.snapshot(), "children": field}
    with pytest.raises(SnapshotCorruptError):
        Interp.from_snapshot(data, machine)
