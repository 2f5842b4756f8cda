"""Sync services: return value to onDone's event.data, exception to onError's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import ImplementationMissingError, MachineLogic, create_machine
from xsm_celery.errors import AsyncServiceError


def fetch_chart(**invoke: Any) -> dict[str, Any]:
    """A chart that invokes 'fetch' in 'loading' and records what onDone/onError got."""
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
                    **invoke,
                }
            },
            "ready": {"on": {"LOAD": "loading"}},
            "failed": {"on": {"LOAD": "loading"}},
        },
    }


def keep(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Store the completion event's type and data in context."""
    ctx["got"] = (event.type, event.data)


def started(fetch: Any, recorder: Recorder | None = None, **invoke: Any) -> Any:
    """A started interpreter of :func:`fetch_chart` with ``fetch`` as the service."""
    logic = MachineLogic(services={"fetch": fetch}, actions={"keep": keep})
    interp = Interp(create_machine(fetch_chart(**invoke), logic=logic))
    if recorder is not None:
        interp.use(recorder)
    return interp.start()


def test_return_value_is_on_done_data() -> None:
    """The service's return value arrives as event.data of done.invoke.<id>."""
    interp = started(lambda i, ctx, e: {"rows": 3})
    interp.send("LOAD")
    assert interp.value == "ready"
    assert interp.context["got"] == ("done.invoke.m.loading", {"rows": 3})


def test_exception_is_on_error_data() -> None:
    """A raising service sends error.platform.<id> whose data is the exception."""
    error = ConnectionError("down")

    def fetch(i: Any, ctx: Any, e: Any) -> None:
        raise error

    interp = started(fetch)
    interp.send("LOAD")
    assert interp.value == "failed"
    assert interp.context["got"] == ("error.platform.m.loading", error)


def test_explicit_invoke_id_names_the_events() -> None:
    """invoke.id replaces the state id in the done/error event names."""
    interp = started(lambda i, ctx, e: 1, id="loader")
    interp.send("LOAD")
    assert interp.context["got"] == ("done.invoke.loader", 1)


def test_service_gets_interpreter_context_and_invoke_event() -> None:
    """A service is called as (interp, ctx, event) with an invoke.<id> event carrying input."""
    seen: list[Any] = []

    def fetch(interp: Any, ctx: Any, event: Any) -> int:
        seen.append((interp.value, ctx is interp.context, event.type, event.payload))
        return 0

    started(fetch, input={"page": 2}).send("LOAD")
    assert seen == [("loading", True, "invoke.m.loading", {"input": {"page": 2}})]


def test_service_runs_on_every_entry() -> None:
    """Re-entering the state runs the service again."""
    calls: list[int] = []
    interp = started(lambda i, ctx, e: calls.append(1))
    interp.send("LOAD")
    interp.send("LOAD")
    assert len(calls) == 2


def test_service_of_a_state_left_in_the_same_step_never_runs() -> None:
    """A state passed through by 'always' does not start its invocation."""
    calls: list[int] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"invoke": {"src": "work"}, "always": "b"}, "b": {}},
    }
    logic = MachineLogic(services={"work": lambda i, c, e: calls.append(1)})
    Interp(create_machine(config, logic=logic)).start()
    assert calls == []


def test_service_hooks_report_start_done_and_error() -> None:
    """on_service_start/done/error see each invocation and its outcome."""
    recorder = Recorder()
    outcomes = iter([ValueError("bad"), "fine"])

    def fetch(i: Any, ctx: Any, e: Any) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    interp = started(fetch, recorder)
    interp.send("LOAD")
    interp.send("LOAD")
    assert recorder.of("on_service_start") == ["fetch", "fetch"]
    [(src, error)] = recorder.of("on_service_error")
    assert src == "fetch"
    assert isinstance(error, ValueError)
    assert recorder.of("on_service_done") == [("fetch", "fine")]


def test_failure_without_on_error_is_logged_and_contained(caplog: pytest.LogCaptureFixture) -> None:
    """A service failing in a state with no onError leaves the state, logs a warning."""
    config = {"id": "m", "initial": "a", "states": {"a": {"invoke": {"src": "work"}}}}

    def work(i: Any, c: Any, e: Any) -> None:
        raise RuntimeError("nobody listens")

    interp = Interp(create_machine(config, logic=MachineLogic(services={"work": work}))).start()
    assert interp.value == "a"
    assert "has no onError" in caplog.text


def test_async_service_runs_on_the_async_interpreter_and_is_refused_by_the_sync_one() -> None:
    """An async service reaches onDone on Interpreter; SyncInterpreter fails it with AsyncServiceError."""

    async def fetch(i: Any, ctx: Any, e: Any) -> int:
        return 1

    interp = started(fetch)
    interp.send("LOAD")
    if Interp.is_async:
        assert interp.value == "ready"
        assert interp.context["got"] == ("done.invoke.m.loading", 1)
    else:
        assert interp.value == "failed"
        assert isinstance(interp.context["got"][1], AsyncServiceError)


def test_missing_service_raises_when_its_state_would_be_entered() -> None:
    """With no logic bound, the send that would start the missing service raises; state kept."""
    machine = create_machine(fetch_chart())
    interp = Interp(machine).start()
    with pytest.raises(ImplementationMissingError, match="fetch"):
        interp.send("LOAD")
    assert interp.value == "idle"


def test_two_invocations_in_one_state_get_distinct_ids() -> None:
    """A list of invokes runs each with its own default id."""
    got: list[str] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "invoke": [
                    {"src": "one", "onDone": {"actions": "keep"}},
                    {"src": "two", "onDone": {"actions": "keep"}},
                ]
            }
        },
    }
    logic = MachineLogic(
        services={"one": lambda i, c, e: 1, "two": lambda i, c, e: 2},
        actions={"keep": lambda i, c, e, a: got.append(f"{e.type}={e.data}")},
    )
    Interp(create_machine(config, logic=logic)).start()
    assert got == ["done.invoke.m.a:invocation[0]=1", "done.invoke.m.a:invocation[1]=2"]
