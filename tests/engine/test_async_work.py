"""Async actions, async services and cancellation, on both drivers (each says what it does)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import MachineLogic, create_machine
from xsm_celery.errors import AsyncServiceError


def chart() -> dict[str, Any]:
    """'idle' --GO--> 'working' (runs the async 'work' service) --CANCEL--> 'idle'."""
    return {
        "id": "m",
        "initial": "idle",
        "context": {},
        "states": {
            "idle": {"on": {"GO": "working", "PING": {"actions": "ping"}}},
            "working": {
                "invoke": {"src": "work", "onDone": {"target": "done", "actions": "keep"}},
                "on": {"CANCEL": "idle"},
            },
            "done": {},
        },
    }


def keep(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Store onDone's data."""
    ctx["got"] = event.data


def logic(**named: Any) -> MachineLogic:
    """The chart's logic: ``work`` and ``ping`` as given, idle stand-ins otherwise."""

    async def idle_work(interp: Any, ctx: Any, event: Any) -> None:
        return None

    return MachineLogic(
        services={"work": named.get("work", idle_work)},
        actions={"keep": keep, "ping": named.get("ping", lambda *a: None)},
    )


def test_async_action_runs_as_a_task_or_is_refused() -> None:
    """An async action runs on Interpreter; SyncInterpreter records AsyncServiceError for it."""
    seen: list[str] = []

    async def ping(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        await asyncio.sleep(0)
        seen.append("pinged")

    machine = create_machine(chart(), logic=logic(ping=ping))
    recorder = Recorder()
    interp = Interp(machine).use(recorder).start()
    interp.send("PING")
    if Interp.is_async:
        assert seen == ["pinged"]
        assert interp.last_error is None
    else:
        assert seen == []
        assert isinstance(interp.last_error, AsyncServiceError)
        assert recorder.of("on_action_error")[0][0] == "ping"
    assert interp.value == "idle"


def test_async_action_failure_is_contained_and_reported() -> None:
    """An async action that raises is an action error: reported to plugins, machine unaffected."""

    async def ping(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        raise ValueError("async action broke")

    machine = create_machine(chart(), logic=logic(ping=ping))
    recorder = Recorder()
    interp = Interp(machine).use(recorder).start()
    interp.send("PING")
    interp.send("GO")
    errors = recorder.of("on_action_error")
    assert [name for name, _ in errors] == ["ping"]
    expected = ValueError if Interp.is_async else AsyncServiceError
    assert isinstance(errors[0][1], expected)
    assert interp.status == "running"


def test_leaving_the_state_cancels_a_running_async_service() -> None:
    """Exiting the invoking state cancels the service's task; its result never arrives."""
    started = []
    cancelled = []

    async def work(interp: Any, ctx: Any, event: Any) -> str:
        started.append(1)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return "late"

    machine = create_machine(chart(), logic=logic(work=work))
    interp = Interp(machine).start()
    interp.send("GO")
    interp.send("CANCEL")
    assert interp.value == "idle"
    assert "got" not in interp.context
    assert interp.children == {}
    if Interp.is_async:
        assert (started, cancelled) == ([1], [1])


def test_stop_cancels_async_services_and_actions() -> None:
    """stop() cancels a running async service and a running async action."""
    cancelled: list[str] = []

    async def work(interp: Any, ctx: Any, event: Any) -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append("service")
            raise
        return "late"

    async def ping(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append("action")
            raise

    interp = Interp(create_machine(chart(), logic=logic(work=work, ping=ping))).start()
    interp.send("PING")
    interp.send("GO")
    interp.stop()
    if Interp.is_async:
        interp.settle()
        assert sorted(cancelled) == ["action", "service"]
    assert interp.status == "stopped"


def test_async_service_result_reaches_on_done_with_its_data() -> None:
    """An async service's return value is onDone's data on the async interpreter."""

    async def work(interp: Any, ctx: Any, event: Any) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"rows": 2}

    machine = create_machine(chart(), logic=logic(work=work))
    interp = Interp(machine).start()
    interp.send("GO")
    if Interp.is_async:
        assert (interp.value, interp.context["got"]) == ("done", {"rows": 2})
    else:
        assert interp.value == "working"
        assert interp.last_error is None
