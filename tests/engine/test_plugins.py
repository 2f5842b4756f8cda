"""Plugins observe everything, cannot break the machine, and can be registered globally."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder, count
from xsm_celery import (
    LoggingInspector,
    MachineLogic,
    PluginBase,
    Receipt,
    SimulatedClock,
    create_machine,
)
from xsm_celery.plugins import (
    clear_global_plugins,
    global_plugins,
    register_global,
    unregister_global,
)


def toggle() -> Any:
    """An unstarted interpreter of the toggle fixture."""
    return Interp(create_machine(load("toggle"), logic=MachineLogic(actions={"count": count})))


class Exploding(PluginBase):
    """Raises from every hook it implements."""

    def on_event_received(self, i: Any, event: Any) -> None:
        raise RuntimeError("plugin bug")

    def on_transition(self, i: Any, from_states: Any, to_states: Any, transition: Any) -> None:
        raise ValueError("another bug")


def test_hook_order_for_one_event() -> None:
    """A plain event: received, actions, transition, processed (with its receipt)."""
    recorder = Recorder()
    interp = toggle().use(recorder).start()
    recorder.calls.clear()
    interp.send("FLIP")
    assert recorder.names() == [
        "on_event_received",
        "on_action_execute",
        "on_transition",
        "on_event_processed",
    ]
    event_type, receipt = recorder.of("on_event_processed")[0]
    assert event_type == "FLIP"
    assert receipt == Receipt(frozenset({"toggle.on"}), True)


def test_start_and_stop_hooks() -> None:
    """start() reports on_interpreter_start then the initial transition; stop() reports once."""
    recorder = Recorder()
    interp = toggle().use(recorder).start()
    assert recorder.names()[:2] == ["on_interpreter_start", "on_transition"]
    assert recorder.of("on_transition")[0] == ([], ["toggle", "toggle.off"], "xstate.init")
    interp.stop()
    interp.stop()
    assert recorder.names().count("on_interpreter_stop") == 1


def test_raising_plugin_is_contained_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    """A raising hook does not stop the step; other plugins hear about it in on_plugin_error."""
    recorder = Recorder()
    interp = toggle().use(Exploding()).use(recorder).start()
    interp.send("FLIP")
    assert interp.value == "on"
    reports = recorder.of("on_plugin_error")
    assert ("Exploding", "on_event_received") in [(name, hook) for name, hook, _ in reports]
    assert ("Exploding", "on_transition") in [(name, hook) for name, hook, _ in reports]
    assert "raised in on_event_received" in caplog.text


def test_raising_on_plugin_error_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A plugin whose on_plugin_error raises too cannot break anything either."""

    class Grumpy(PluginBase):
        def on_plugin_error(self, i: Any, plugin: Any, hook: str, error: BaseException) -> None:
            raise RuntimeError("grumpy")

    interp = toggle().use(Exploding()).use(Grumpy()).start()
    interp.send("FLIP")
    assert interp.value == "on"
    assert "raised in on_plugin_error" in caplog.text


def test_duck_typed_plugins_need_only_the_hooks_they_use() -> None:
    """An object with just one hook method works as a plugin."""

    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def on_event_received(self, i: Any, event: Any) -> None:
            self.n += 1

    counter = Counter()
    interp = toggle().use(counter).start()
    interp.send("FLIP")
    assert counter.n == 1


def test_use_is_chainable_and_idempotent() -> None:
    """use() returns the interpreter and attaches the same plugin once."""
    recorder = Recorder()
    interp = toggle()
    assert interp.use(recorder).use(recorder) is interp
    assert interp.plugins == (recorder,)


def test_before_send_can_answer_an_event() -> None:
    """A plugin returning a Receipt from on_before_send answers without running the event."""
    canned = Receipt(frozenset({"toggle.off"}), False, duplicate=True)

    class Inbox(PluginBase):
        def on_before_send(self, i: Any, event: Any) -> Receipt | None:
            return canned if event.payload.get("seen") else None

    interp = toggle().use(Inbox()).start()
    assert interp.send("FLIP", wait=True, seen=True) is canned
    assert interp.value == "off"
    assert interp.send("FLIP", wait=True).changed


def test_global_plugins_attach_to_new_interpreters_only() -> None:
    """register_global reaches interpreters created afterwards, restored ones included."""
    recorder = Recorder()
    existing = toggle()
    register_global(recorder)
    register_global(recorder)
    try:
        assert global_plugins() == [recorder]
        fresh = toggle().start()
        fresh.send("FLIP")
        restored = Interp.from_snapshot(fresh.get_snapshot(), fresh.machine)
        assert recorder in restored.plugins
        assert recorder not in existing.plugins
        assert recorder.names().count("on_event_received") == 1
    finally:
        assert unregister_global(recorder)
        clear_global_plugins()
    assert not unregister_global(recorder)
    assert global_plugins() == []


def test_dropped_events_are_reported() -> None:
    """Events to a stopped machine and forged engine events reach on_event_dropped."""
    recorder = Recorder()
    interp = toggle().use(recorder).start()
    interp.send("done.invoke.x")
    interp.stop()
    interp.send("FLIP")
    assert recorder.of("on_event_dropped") == [
        ("done.invoke.x", "engine_event"),
        ("FLIP", "not_running"),
    ]


def test_logging_inspector_logs_redacted_events(caplog: pytest.LogCaptureFixture) -> None:
    """LoggingInspector logs events, transitions and actions with secrets masked."""
    caplog.set_level(logging.INFO, logger="xsm_celery.inspector")
    interp = toggle().use(LoggingInspector(log_context=True)).start()
    interp.context["api_key"] = "sk-live-123"
    interp.send("FLIP", password="hunter2", user="ann")
    text = caplog.text
    assert "event FLIP" in text
    assert "'user': 'ann'" in text
    assert "hunter2" not in text
    assert "sk-live-123" not in text
    assert "['toggle.off'] -> ['toggle.on']" in text
    assert "action count" in text


def test_logging_inspector_reports_services_and_failures(caplog: pytest.LogCaptureFixture) -> None:
    """Service start, done and error records appear, errors at WARNING."""
    caplog.set_level(logging.INFO, logger="xsm_celery.inspector")
    outcomes = iter([RuntimeError("nope"), "ok"])

    def work(i: Any, c: Any, e: Any) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    logic = MachineLogic(
        services={"work": work},
        actions={"retryBump": lambda *a: None, "retryReset": lambda *a: None},
        guards={"retryCanRetry": lambda c, e: True},
        delays={"retryDelay": 10},
    )
    clock = SimulatedClock()
    interp = Interp(create_machine(load("retry"), logic=logic), clock=clock)
    interp.use(LoggingInspector()).start()
    clock.increment(10)
    assert interp.status == "done"
    assert "service work failed: RuntimeError: nope" in caplog.text
    assert "service work done: ok" in caplog.text
    assert "done, output None" in caplog.text
