"""Built-in actions by name and as Python creators: assign, raise, sendTo, sendParent, emit, log,
cancel, spawnChild, stopChild; a failing built-in is contained like any action."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import (
    InvalidConfigError,
    MachineLogic,
    SimulatedClock,
    create_machine,
    from_callback,
)
from xsm_celery.actions import (
    assign,
    cancel,
    emit,
    log,
    raise_,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
)


def one_state(actions: Any, **extra: Any) -> dict[str, Any]:
    """A machine whose GO event runs ``actions`` in place; extra states may be added."""
    return {
        "id": "m",
        "initial": "a",
        "context": {"n": 1},
        "states": {"a": {"on": {"GO": {"actions": actions}, **extra.pop("on", {})}}, **extra},
    }


def start(config: dict[str, Any], logic: MachineLogic | None = None, clock: Any = None) -> Any:
    """A started interpreter of ``config``."""
    return Interp(create_machine(config, logic=logic), clock=clock).start()


def test_assign_by_name_with_values_and_computed_values() -> None:
    """{"type": "assign"} sets plain values and calls callables with {context, event}."""
    interp = start(
        one_state(
            [
                {"type": "assign", "params": {"assignment": {"label": "x"}}},
                assign({"n": lambda a: a["context"]["n"] + a["event"].payload["by"]}),
            ]
        )
    )
    interp.send("GO", by=4)
    assert interp.context == {"n": 5, "label": "x"}


def test_assign_function_and_flat_json_spelling() -> None:
    """An assign function returns the update; the flat XState v4 spelling works too."""
    interp = start(
        one_state(
            [
                assign(lambda a: {"m": a["context"]["n"] * 10}),
                {"type": "xstate.assign", "assignment": {"k": 1}},
            ]
        )
    )
    interp.send("GO")
    assert interp.context == {"n": 1, "m": 10, "k": 1}


def test_raise_runs_before_events_sent_from_actions_and_after_the_step() -> None:
    """A raised event is internal: processed once the step settles, before queued external events."""
    order: list[str] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"on": {"GO": {"target": "b", "actions": ["kick", raise_("INNER")]}}},
            "b": {"entry": "saw_b", "on": {"INNER": "c", "OUTER": "d"}},
            "c": {"entry": "saw_c", "on": {"OUTER": "e"}},
            "d": {},
            "e": {},
        },
    }
    logic = MachineLogic(
        actions={
            "kick": lambda i, c, e, a: i.send("OUTER"),
            "saw_b": lambda i, c, e, a: order.append("b"),
            "saw_c": lambda i, c, e, a: order.append("c"),
        }
    )
    interp = start(config, logic)
    interp.send("GO")
    assert order == ["b", "c"]
    assert interp.value == "e"


def test_delayed_raise_fires_when_due_and_cancel_drops_it() -> None:
    """raise with a delay waits for the clock; cancel(send_id) drops a pending one."""
    config = one_state(
        [raise_("TICK", delay=500, send_id="t")],
        on={"TICK": "ticked", "STOP": {"actions": cancel("t")}},
        ticked={},
    )
    clock = SimulatedClock()
    interp = start(config, clock=clock)
    interp.send("GO")
    clock.increment(499)
    assert interp.value == "a"
    clock.increment(1)
    assert interp.value == "ticked"
    again = start(config, clock=clock)
    again.send("GO")
    again.send("STOP")
    clock.increment(1000)
    assert again.value == "a"


def test_delayed_raise_with_a_named_delay_survives_a_snapshot() -> None:
    """A pending delayed event is in the snapshot and fires after restore at its due time."""
    config = one_state([raise_("TICK", delay="later")], on={"TICK": "ticked"}, ticked={})
    machine = create_machine(config, logic=MachineLogic(delays={"later": 300}))
    clock = SimulatedClock(wall_start=1000.0)
    interp = Interp(machine, clock=clock).start()
    interp.send("GO")
    clock.increment(100)
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, machine, clock=clock)
    clock.increment(199)
    assert restored.value == "a"
    clock.increment(1)
    assert restored.value == "ticked"


def test_emit_reaches_listeners_by_type_and_wildcard_and_unsubscribes() -> None:
    """emit calls on(type) and on("*") listeners; unsubscribe stops them; a raising one is contained."""
    config = one_state([emit({"type": "progress", "pct": 50}), emit("other")])
    interp = start(config)
    got: list[tuple[str, str, Any]] = []
    sub = interp.on("progress", lambda e: got.append(("typed", e.type, e.payload)))
    interp.on("*", lambda e: got.append(("any", e.type, e.payload)))
    interp.on("other", lambda e: 1 / 0)
    interp.send("GO")
    assert got == [
        ("typed", "progress", {"pct": 50}),
        ("any", "progress", {"pct": 50}),
        ("any", "other", {}),
    ]
    sub.unsubscribe()
    got.clear()
    interp.send("GO")
    assert [g[0] for g in got] == ["any", "any"]
    assert interp.last_error is None


def test_log_writes_the_message_with_its_label(caplog: pytest.LogCaptureFixture) -> None:
    """log writes a plain or computed message to the xsm_celery.machine logger."""
    caplog.set_level(logging.INFO, logger="xsm_celery.machine")
    interp = start(one_state([log("plain"), log(lambda a: f"n={a['context']['n']}", label="ctx")]))
    interp.send("GO")
    messages = [r.getMessage() for r in caplog.records if r.name == "xsm_celery.machine"]
    assert messages == ["[m] plain", "[m] ctx: n=1"]


def test_send_to_a_callback_actor_and_send_parent_without_a_parent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """sendTo delivers to a child's receive handlers; sendParent with no parent is a logged no-op."""
    received: list[Any] = []

    def child(send_back: Any, receive: Any, ctx: Any, event: Any) -> None:
        receive(lambda e: received.append((e.type, e.payload)))

    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "invoke": {"src": "child", "id": "kid"},
                "on": {
                    "GO": {
                        "actions": [send_to("kid", {"type": "HELLO", "x": 1}), send_parent("UP")]
                    }
                },
            }
        },
    }
    interp = start(config, MachineLogic(services={"child": from_callback(child)}))
    interp.send("GO")
    assert received == [("HELLO", {"x": 1})]
    assert "sendParent with no parent" in caplog.text
    assert interp.last_error is None


def test_spawn_and_stop_a_child_by_id() -> None:
    """spawnChild starts a service as a child listed by id; stopChild runs its cleanup."""
    events: list[str] = []

    def child(send_back: Any, receive: Any, ctx: Any, event: Any) -> Any:
        events.append(f"start {event.payload['input']}")
        return lambda: events.append("cleanup")

    config = one_state(
        [spawn_child("worker", actor_id="w1", input={"k": 1})],
        on={"STOP": {"actions": stop_child("w1")}},
    )
    interp = start(config, MachineLogic(services={"worker": from_callback(child)}))
    interp.send("GO")
    assert list(interp.children) == ["w1"]
    interp.send("STOP")
    assert interp.children == {}
    assert events == ["start {'k': 1}", "cleanup"]


def test_a_spawned_child_that_raises_reports_an_error_event() -> None:
    """A spawned service that raises sends error.platform.<id>, which the chart can handle."""

    def broken(interp: Any, ctx: Any, event: Any) -> None:
        raise RuntimeError("child broke")

    config = one_state(
        [spawn_child("broken", actor_id="b")],
        on={"error.platform.b": {"target": "failed"}},
        failed={},
    )
    interp = start(config, MachineLogic(services={"broken": broken}))
    interp.send("GO")
    assert interp.value == "failed"
    assert interp.status == "running"


def test_a_failing_builtin_is_contained_like_any_action() -> None:
    """A built-in that raises is an action error: reported, rest of the list skipped, step completes."""
    recorder = Recorder()
    config = one_state([assign(lambda a: 1 / 0), assign({"after": True})], on={"NEXT": "b"}, b={})
    interp = Interp(create_machine(config)).use(recorder).start()
    interp.send("GO")
    interp.send("NEXT")
    assert "after" not in interp.context
    assert isinstance(interp.last_error, ZeroDivisionError)
    assert recorder.of("on_action_error")[0][0] == "xstate.assign"
    assert interp.value == "b"


@pytest.mark.parametrize(
    "action",
    [
        {"type": "raise"},
        {"type": "assign", "params": {"nope": 1}},
        {"type": "sendTo", "params": {"event": "X"}},
        {"type": "raise", "params": {"event": "done.invoke.x"}},
        {"type": "cancel", "params": "t"},
    ],
)
def test_builtins_with_bad_params_are_refused_at_create_time(action: dict[str, Any]) -> None:
    """A built-in missing a required param, with an unknown one, or sending an engine name is refused."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(one_state([action]))
    assert caught.value.path == "states.a.on.GO.actions[0]"


def test_a_logic_action_with_a_builtin_name_stays_the_logics() -> None:
    """A chart's own action named like a built-in keeps its implementation."""
    calls: list[str] = []
    config = one_state("log")
    interp = start(config, MachineLogic(actions={"log": lambda i, c, e, a: calls.append("mine")}))
    interp.send("GO")
    assert calls == ["mine"]
