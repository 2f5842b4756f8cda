"""Events: their shape, and engine events that no caller can forge through send()."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.drivers import Interp
from xsm_celery import (
    Event,
    InterpreterStoppedError,
    MachineLogic,
    SimulatedClock,
    create_machine,
    from_callback,
)
from xsm_celery.engine import ENGINE_EVENT_PREFIXES, EngineEvent, is_engine_event_type


def saga() -> Any:
    """A step waiting on an actor and a timeout; only engine events may move it."""
    config = {
        "id": "saga",
        "initial": "charging",
        "states": {
            "charging": {
                "invoke": {"src": "charge", "id": "charge", "onDone": "paid", "onError": "failed"},
                "after": {"1000": "timedOut"},
                "on": {"done.state.saga": "paid"},
            },
            "paid": {},
            "failed": {},
            "timedOut": {},
        },
    }
    logic = MachineLogic(services={"charge": from_callback(lambda *a: None)})
    return Interp(create_machine(config, logic=logic), clock=SimulatedClock()).start()


@pytest.mark.parametrize(
    "forged",
    [
        "done.invoke.charge",
        "error.platform.charge",
        "after.1000.saga.charging",
        "done.state.saga",
        "xstate.init",
        Event("done.invoke.charge", {"data": "fake"}),
        {"type": "error.platform.charge"},
        EngineEvent("done.invoke.charge", "fake"),
    ],
)
def test_engine_events_cannot_be_forged(forged: Any, caplog: pytest.LogCaptureFixture) -> None:
    """send() of an engine event name is ignored with a warning; no transition happens."""
    interp = saga()
    receipt = interp.send(forged, wait=True)
    assert interp.value == "charging"
    assert receipt.changed is False
    assert "reserved for engine events" in caplog.text


def test_forged_events_via_send_threadsafe_are_ignored_too() -> None:
    """The mailbox path applies the same refusal."""
    interp = saga()
    before = interp.value
    interp.send_threadsafe("error.platform.charge")
    interp.tick()
    assert interp.value == before


def test_engine_prefixes_are_recognised() -> None:
    """is_engine_event_type knows every reserved prefix and nothing else."""
    for prefix in ENGINE_EVENT_PREFIXES:
        assert is_engine_event_type(prefix + "x")
    assert not is_engine_event_type("DONE")
    assert not is_engine_event_type("invoke.step")


def test_event_shape() -> None:
    """Event has type, payload (a dict, empty by default) and data (None on plain events)."""
    event = Event("PAY")
    assert (event.type, event.payload, event.data) == ("PAY", {}, None)
    assert Event("PAY", {"n": 1}) == Event("PAY", {"n": 1})
    assert Event("PAY", {"n": 1}) != Event("PAY", {"n": 2})
    assert Event("PAY", {"n": 1}).to_dict() == {"type": "PAY", "payload": {"n": 1}}
    assert "PAY" in repr(Event("PAY"))
    assert "data=" in repr(EngineEvent("done.invoke.x", 5))


def test_send_to_a_stopped_interpreter_is_dropped_with_a_receipt_error() -> None:
    """After stop(), send() drops the event; wait=True returns InterpreterStoppedError."""
    interp = saga()
    interp.stop()
    assert interp.send("ANY") is None
    receipt = interp.send("ANY", wait=True)
    assert isinstance(receipt.error, InterpreterStoppedError)
    assert interp.status == "stopped"


def test_send_before_start_is_dropped() -> None:
    """An interpreter that is not started yet drops events."""
    machine = create_machine(
        {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}}
    )
    interp = Interp(machine)
    interp.send("GO")
    assert interp.start().value == "a"


def test_start_after_stop_is_refused() -> None:
    """A stopped interpreter cannot be started again."""
    interp = saga()
    interp.stop()
    with pytest.raises(InterpreterStoppedError, match="create a new one"):
        interp.start()


def test_start_twice_is_a_no_op() -> None:
    """Calling start() on a running interpreter does nothing more."""
    interp = saga()
    assert interp.start() is interp
    assert interp.status == "running"
