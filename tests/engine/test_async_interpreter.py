"""The async Interpreter runs the same charts and logic, plus async services and loop timers."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.charts import load
from tests.engine.helpers import Recorder, count, note
from xsm_celery import Interpreter, MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.engine import WallClock


def fetch_chart() -> dict[str, Any]:
    """Invoke 'fetch' on LOAD; keep the outcome's data."""
    return {
        "id": "m",
        "initial": "idle",
        "context": {},
        "states": {
            "idle": {"on": {"LOAD": "loading"}},
            "loading": {
                "invoke": {
                    "src": "fetch",
                    "onDone": {"target": "ready", "actions": "keep"},
                    "onError": {"target": "failed", "actions": "keep"},
                },
                "on": {"CANCEL": "idle"},
            },
            "ready": {},
            "failed": {},
        },
    }


def keep(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Remember the completion data."""
    ctx["got"] = event.data


def test_same_chart_same_outcome_on_both_drivers() -> None:
    """A sequence of events gives the same states and context on both interpreters."""
    logic = MachineLogic(actions={"note": note})
    machine = create_machine(load("upload"), logic=logic)
    sync = SyncInterpreter(machine).start()

    async def drive() -> Interpreter:
        interp = await Interpreter(machine).start()
        for event in ("FILE_OK", "THUMB_OK"):
            await interp.send(event)
        return interp

    for event in ("FILE_OK", "THUMB_OK"):
        sync.send(event)
    interp = asyncio.run(drive())
    assert (interp.value, interp.context, interp.status) == (sync.value, sync.context, sync.status)


def test_async_service_result_goes_to_on_done() -> None:
    """An async def service runs as a task; its result is onDone's event.data."""

    async def fetch(interp: Any, ctx: Any, event: Any) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"rows": 2}

    async def main() -> Interpreter:
        machine = create_machine(
            fetch_chart(), logic=MachineLogic(services={"fetch": fetch}, actions={"keep": keep})
        )
        interp = await Interpreter(machine).start()
        await interp.send("LOAD")
        assert interp.value == "loading"
        for _ in range(5):
            await asyncio.sleep(0)
        return interp

    interp = asyncio.run(main())
    assert interp.value == "ready"
    assert interp.context["got"] == {"rows": 2}


def test_async_service_error_goes_to_on_error() -> None:
    """An async service that raises sends its exception to onError."""
    recorder = Recorder()

    async def fetch(interp: Any, ctx: Any, event: Any) -> None:
        raise TimeoutError("slow")

    async def main() -> Interpreter:
        machine = create_machine(
            fetch_chart(), logic=MachineLogic(services={"fetch": fetch}, actions={"keep": keep})
        )
        interp = await Interpreter(machine).use(recorder).start()
        await interp.send("LOAD")
        for _ in range(5):
            await asyncio.sleep(0)
        return interp

    interp = asyncio.run(main())
    assert interp.value == "failed"
    assert isinstance(interp.context["got"], TimeoutError)
    assert [src for src, _ in recorder.of("on_service_error")] == ["fetch"]


def test_leaving_the_state_cancels_the_task_and_ignores_its_result() -> None:
    """Exiting while an async service runs cancels it; no late onDone arrives."""
    started = asyncio.Event()

    async def fetch(interp: Any, ctx: Any, event: Any) -> str:
        started.set()
        await asyncio.sleep(10)
        return "late"

    async def main() -> Interpreter:
        machine = create_machine(
            fetch_chart(), logic=MachineLogic(services={"fetch": fetch}, actions={"keep": keep})
        )
        interp = await Interpreter(machine).start()
        await interp.send("LOAD")
        await started.wait()
        await interp.send("CANCEL")
        await asyncio.sleep(0.01)
        return interp

    interp = asyncio.run(main())
    assert interp.value == "idle"
    assert "got" not in interp.context


def test_simulated_clock_increment_works_under_await() -> None:
    """await clock.increment(ms) fires timers like the plain call does."""
    config = {"id": "m", "initial": "a", "states": {"a": {"after": {"500": "b"}}, "b": {}}}

    async def main() -> Interpreter:
        clock = SimulatedClock()
        interp = await Interpreter(create_machine(config), clock=clock).start()
        await clock.increment(499)
        assert interp.value == "a"
        await clock.increment(1)
        return interp

    assert asyncio.run(main()).value == "b"


def test_wall_clock_timer_wakes_the_loop() -> None:
    """On a WallClock the event loop fires a due timer without anyone calling tick()."""
    config = {"id": "m", "initial": "a", "states": {"a": {"after": {"20": "b"}}, "b": {}}}

    async def main() -> Interpreter:
        interp = await Interpreter(create_machine(config), clock=WallClock()).start()
        await asyncio.sleep(0.2)
        return interp

    assert asyncio.run(main()).value == "b"


def test_send_threadsafe_is_delivered_by_the_loop() -> None:
    """An event posted from another thread runs on the loop without a further send()."""
    logic = MachineLogic(actions={"count": count})

    async def main() -> Interpreter:
        interp = await Interpreter(create_machine(load("toggle"), logic=logic)).start()
        thread = threading.Thread(target=lambda: interp.send_threadsafe("FLIP"))
        thread.start()
        thread.join()
        for _ in range(20):
            if interp.value == "on":
                break
            await asyncio.sleep(0.005)
        return interp

    assert asyncio.run(main()).value == "on"


def test_wait_receipt_and_stop() -> None:
    """await send(wait=True) returns a receipt; await stop() stops the interpreter."""
    logic = MachineLogic(actions={"count": count})

    async def main() -> tuple[Any, str]:
        interp = await Interpreter(create_machine(load("toggle"), logic=logic)).start()
        receipt = await interp.send("FLIP", wait=True)
        await interp.stop()
        return receipt, interp.status

    receipt, status = asyncio.run(main())
    assert receipt.changed
    assert receipt.state_ids == frozenset({"toggle.on"})
    assert status == "stopped"


def test_snapshot_round_trip_into_the_async_driver() -> None:
    """A snapshot from SyncInterpreter restores into Interpreter and goes on."""
    logic = MachineLogic(actions={"count": count})
    machine = create_machine(load("toggle"), logic=logic)
    sync = SyncInterpreter(machine).start()
    sync.send("FLIP")

    async def main() -> Interpreter:
        interp = Interpreter.from_snapshot(sync.get_snapshot(), machine)
        await interp.send("FLIP")
        return interp

    interp = asyncio.run(main())
    assert interp.value == "off"
    assert interp.context["flips"] == 2


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_callback_actor_cleanup_on_both_drivers(driver: str) -> None:
    """A from_callback actor is cleaned up once on exit whichever driver runs it."""
    from xsm_celery import from_callback

    closed: list[int] = []
    config = {
        "id": "m",
        "initial": "on",
        "states": {"on": {"invoke": {"src": "sock"}, "on": {"OFF": "off"}}, "off": {}},
    }
    logic = MachineLogic(
        services={"sock": from_callback(lambda sb, rc, ctx, ev: lambda: closed.append(1))}
    )
    machine = create_machine(config, logic=logic)
    if driver == "sync":
        interp = SyncInterpreter(machine).start()
        interp.send("OFF")
        interp.send("OFF")
    else:

        async def main() -> None:
            interp = await Interpreter(machine).start()
            await interp.send("OFF")
            await interp.stop()

        asyncio.run(main())
    assert closed == [1]
