"""The interpreter's lifecycle and views: status, id, store_key, wall_now, repr."""

from __future__ import annotations

from typing import Any

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import note
from xsm_celery import MachineLogic, SimulatedClock, create_machine


def upload() -> Any:
    """An unstarted interpreter of the upload fixture on a clock at wall time 1000 s."""
    machine = create_machine(load("upload"), logic=MachineLogic(actions={"note": note}))
    return Interp(machine, clock=SimulatedClock(wall_start=1000.0))


def test_status_goes_not_started_running_done() -> None:
    """status moves from not_started to running on start() and to done at a top-level final."""
    interp = upload()
    assert interp.status == "not_started"
    assert interp.value == {}
    assert interp.current_state_ids == set()
    interp.start()
    assert interp.status == "running"
    interp.send("CANCEL")
    assert interp.status == "done"
    interp.stop()
    assert interp.status == "done"


def test_stop_before_start_marks_stopped() -> None:
    """stop() on an interpreter that never started leaves it stopped."""
    interp = upload()
    interp.stop()
    assert interp.status == "stopped"


def test_identity_and_clock_views() -> None:
    """id is the machine id; store_key starts None and is settable; wall_now follows the clock."""
    interp = upload().start()
    assert interp.id == "upload"
    assert interp.machine.id == "upload"
    assert interp.store_key is None
    interp.store_key = "order-42"
    assert interp.store_key == "order-42"
    assert interp.wall_now() == 1000.0
    interp.clock.increment(1500)  # type: ignore[attr-defined]
    assert interp.wall_now() == 1001.5
    assert "upload" in repr(interp)
    assert "running" in repr(interp)


def test_configuration_and_active_leaves() -> None:
    """configuration holds every active node; active_leaves only the leaves, in order."""
    interp = upload().start()
    assert {n.id for n in interp.configuration} == {
        "upload",
        "upload.working",
        "upload.working.file",
        "upload.working.file.sending",
        "upload.working.thumb",
        "upload.working.thumb.rendering",
    }
    assert [n.id for n in interp.active_leaves] == [
        "upload.working.file.sending",
        "upload.working.thumb.rendering",
    ]
