"""0.11.0's top-level names: action creators, JSON built-ins, waiting helpers, plugins.

Every name xstate-statemachine 0.11.0 exports for these features is importable from
``xsm_celery`` with a signature that accepts the calls 0.11.0's users write, and means the
same on both engines (the behaviour tests run on each).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import Any

import pytest

import xsm_celery
import xsm_celery.actions
from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import (
    InvalidConfigError,
    MachineLogic,
    RunawayChainError,
    SimulatedClock,
    SyncInterpreter,
    WallClock,
    create_machine,
)
from xsm_celery.actions import (
    assign,
    choose,
    enqueue_actions,
    escalate,
    forward_to,
    log,
    pure,
    raise_,
    spawn_child,
)
from xsm_celery.errors import ArgumentTypeError, WaitTimeoutError

P = inspect.Parameter

#: 0.11.0's parameters for each name: (name, kind, default or P.empty), read off its
#: signatures; ours may add keyword-only options after them.
V011_SIGNATURES: dict[str, list[tuple[str, Any, Any]]] = {
    "assign": [("assignment", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "raise_": [("event", P.POSITIONAL_OR_KEYWORD, P.empty), ("delay", P.KEYWORD_ONLY, None)],
    "send_to": [
        ("target", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("event", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("delay", P.KEYWORD_ONLY, None),
        ("send_id", P.KEYWORD_ONLY, None),
    ],
    "send_parent": [("event", P.POSITIONAL_OR_KEYWORD, P.empty), ("delay", P.KEYWORD_ONLY, None)],
    "emit": [("event", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "log": [("expr", P.POSITIONAL_OR_KEYWORD, ""), ("label", P.KEYWORD_ONLY, None)],
    "cancel": [("send_id", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "spawn_child": [
        ("src", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("actor_id", P.KEYWORD_ONLY, None),
        ("system_id", P.KEYWORD_ONLY, None),
        ("input", P.KEYWORD_ONLY, None),
    ],
    "stop_child": [("actor_id", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "forward_to": [("target", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "escalate": [("error", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "choose": [("conditions", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "pure": [("fn", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "enqueue_actions": [("fn", P.POSITIONAL_OR_KEYWORD, P.empty)],
    "wait_for": [
        ("interpreter", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("predicate", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("timeout", P.KEYWORD_ONLY, 10.0),
        ("poll_interval", P.KEYWORD_ONLY, 0.005),
    ],
    "wait_for_sync": [
        ("interpreter", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("predicate", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("timeout", P.KEYWORD_ONLY, 10.0),
        ("poll_interval", P.KEYWORD_ONLY, 0.005),
    ],
    "to_promise": [
        ("interpreter", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("timeout", P.KEYWORD_ONLY, None),
    ],
    "get_initial_snapshot": [
        ("machine", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("input", P.KEYWORD_ONLY, None),
    ],
    "initial_transition": [
        ("machine", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("input", P.KEYWORD_ONLY, None),
    ],
    "get_next_snapshot": [
        ("machine", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("snapshot", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("event", P.POSITIONAL_OR_KEYWORD, P.empty),
    ],
    "pure_transition": [
        ("machine", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("snapshot", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("event", P.POSITIONAL_OR_KEYWORD, P.empty),
    ],
}


@pytest.mark.parametrize("name", sorted(V011_SIGNATURES))
def test_name_has_v011_signature(name: str) -> None:
    """Each name is exported at the top level and takes 0.11.0's parameters in its order."""
    assert name in xsm_celery.__all__
    ours = inspect.signature(getattr(xsm_celery, name)).parameters
    expected = V011_SIGNATURES[name]
    assert [(p.name, p.kind, p.default) for p in list(ours.values())[: len(expected)]] == expected
    extra = list(ours.values())[len(expected) :]
    assert all(p.kind is P.KEYWORD_ONLY and p.default is not P.empty for p in extra)


def test_creators_are_the_same_objects_everywhere() -> None:
    """``xsm_celery``, ``xsm_celery.actions`` and ``xsm_celery.engine`` export one function."""
    for name in xsm_celery.actions.__all__:
        assert getattr(xsm_celery, name) is getattr(xsm_celery.actions, name)
        assert getattr(xsm_celery.engine, name) is getattr(xsm_celery.actions, name)


def test_creators_return_chart_data() -> None:
    """A creator's result is the JSON spelling, so the chart stays data."""
    assert forward_to("kid") == {"type": "xstate.forwardTo", "params": {"to": "kid"}}
    assert escalate("bad") == {"type": "xstate.escalate", "params": {"error": "bad"}}
    assert spawn_child("w", actor_id="a", system_id="s")["params"] == {
        "src": "w",
        "id": "a",
        "systemId": "s",
    }
    branch = [{"guard": "g", "actions": ["a"]}]
    assert choose(branch) == {"type": "xstate.choose", "params": {"conditions": branch}}


def kid_machine(**logic: Any) -> Any:
    """A child that grows on GROW and can escalate a failure to its parent."""
    return create_machine(
        {
            "id": "kid",
            "initial": "small",
            "context": {"seen": []},
            "states": {
                "small": {
                    "on": {
                        "GROW": "big",
                        "NOTE": {
                            "actions": assign(
                                {"seen": lambda a: [*a["context"]["seen"], a["event"].payload]}
                            )
                        },
                        "FAIL": {"actions": {"type": "escalate", "params": {"error": "boom"}}},
                        "FAIL_EXC": {"actions": escalate(lambda a: ValueError(a["event"].type))},
                    }
                },
                "big": {"type": "final"},
            },
        },
        MachineLogic(**logic),
    )


def parent(on: dict[str, Any]) -> Any:
    """A parent invoking ``kid``; its onError keeps the escalated error."""
    chart = {
        "id": "boss",
        "initial": "hiring",
        "context": {"error": None},
        "states": {
            "hiring": {
                "invoke": {
                    "id": "kid",
                    "src": "kid",
                    "onError": {
                        "target": "failed",
                        "actions": assign({"error": lambda a: a["event"].data}),
                    },
                },
                "on": on,
            },
            "failed": {},
        },
    }
    return Interp(create_machine(chart, MachineLogic(services={"kid": kid_machine()}))).start()


@pytest.mark.parametrize(
    "action", [forward_to("kid"), {"type": "forwardTo", "params": {"to": "kid"}}]
)
def test_forward_to_sends_the_current_event_to_the_child(action: Any) -> None:
    """``forwardTo`` (creator or JSON) delivers the event being processed, payload included."""
    interp = parent({"NOTE": {"actions": action}, "GROW": {"actions": action}})
    interp.send("NOTE", n=3)
    child = interp.children["kid"].child
    assert child.context["seen"] == [{"n": 3}]
    interp.send("GROW")
    assert child.status == "done"


def test_escalate_reaches_the_parents_on_error() -> None:
    """A JSON ``escalate`` with a value arrives as a RuntimeError in the parent's onError."""
    interp = parent({"FAIL": {"actions": forward_to("kid")}})
    interp.send("FAIL")
    assert interp.current_state_ids == {"boss.failed"}
    assert isinstance(interp.context["error"], RuntimeError)
    assert str(interp.context["error"]) == "boom"


def test_escalate_passes_an_exception_through() -> None:
    """An exception (here computed from the event) is given to onError as it is."""
    interp = parent({"FAIL_EXC": {"actions": forward_to("kid")}})
    interp.send("FAIL_EXC")
    assert isinstance(interp.context["error"], ValueError)
    assert str(interp.context["error"]) == "FAIL_EXC"


def test_escalate_without_parent_is_a_logged_no_op(caplog: pytest.LogCaptureFixture) -> None:
    """A machine with no parent logs the escalation and keeps running."""
    interp = Interp(kid_machine()).start()
    interp.send("FAIL")
    assert interp.current_state_ids == {"kid.small"}
    assert interp.last_error is None
    assert "escalate with no parent" in caplog.text


def counter_chart(actions: Any) -> dict[str, Any]:
    """A machine whose GO runs ``actions`` in place; ``log`` collects what ran."""
    return {
        "id": "m",
        "initial": "a",
        "context": {"n": 1, "log": []},
        "states": {"a": {"on": {"GO": {"actions": actions}}}},
    }


def noting(text: str) -> Any:
    return lambda i, ctx, e, a: ctx["log"].append(text)


LOGIC = MachineLogic(
    actions={"first": noting("first"), "second": noting("second"), "third": noting("third")},
    guards={"big": lambda ctx, e: ctx["n"] > 5, "above": lambda ctx, e, p: ctx["n"] > p["min"]},
)


def run(actions: Any, logic: MachineLogic = LOGIC, **payload: Any) -> Any:
    interp = Interp(create_machine(counter_chart(actions), logic)).start()
    interp.send("GO", **payload)
    return interp


def test_choose_runs_the_first_branch_whose_guard_passes() -> None:
    """Branches are tried in order; an unguarded one always passes; only one runs."""
    action = {
        "type": "choose",
        "params": {
            "conditions": [
                {"guard": "big", "actions": ["first"]},
                {"guard": {"type": "above", "params": {"min": 0}}, "actions": ["second"]},
                {"actions": ["third"]},
            ]
        },
    }
    assert run(action).context["log"] == ["second"]
    assert run([assign({"n": 9}), action]).context["log"] == ["first"]


def test_choose_takes_xstate_v4_spelling_and_nested_built_ins() -> None:
    """``conds`` / ``cond`` (v4 exports, flat params) work; a nested built-in runs in place."""
    action = {
        "type": "xstate.choose",
        "conds": [
            {"cond": {"type": "not", "guard": "big"}, "actions": [assign({"n": 50}), "first"]},
            {"actions": "third"},
        ],
    }
    interp = run(action)
    assert interp.context == {"n": 50, "log": ["first"]}


def test_choose_guard_may_be_a_callable() -> None:
    """In a Python chart a branch guard is a callable of {context, event}."""
    action = choose([{"guard": lambda a: a["event"].payload["go"], "actions": ["first"]}])
    assert run(action, go=True).context["log"] == ["first"]
    assert run(action, go=False).context["log"] == []


def test_pure_runs_what_its_function_returns() -> None:
    """``pure`` returns one action, a list, or None; the actions run in order."""
    picked = pure(lambda a: ["second", "first"] if a["context"]["n"] else None)
    assert run(picked).context["log"] == ["second", "first"]
    assert run(pure(lambda a: None)).context["log"] == []
    assert run(pure(lambda a: log("x"))).context["log"] == []


def test_pure_in_json_names_a_function_of_the_logic() -> None:
    """A JSON ``pure`` names its function in ``MachineLogic(actions=...)``."""
    logic = LOGIC.merge(MachineLogic(actions={"pick": lambda a: ["third"]}))
    assert run({"type": "pure", "params": {"get": "pick"}}, logic).context["log"] == ["third"]


def test_enqueue_actions_sees_context_in_order_and_checks_guards() -> None:
    """Enqueued actions run in order; a later callback sees what an earlier assign wrote.

    ``check`` sees the context as the callback runs (the enqueued assign has not run yet),
    as in XState v5.
    """
    seen: list[int] = []

    def plan(a: Any) -> None:
        enqueue = a["enqueue"]
        enqueue.assign({"n": 10})
        if not a["check"]("big"):
            enqueue("first")
        if not a["check"]({"type": "above", "params": {"min": 100}}):
            enqueue({"type": "second"})
        enqueue(enqueue_actions(lambda b: seen.append(b["context"]["n"])))

    interp = run(enqueue_actions(plan))
    assert interp.context["log"] == ["first", "second"]
    assert seen == [10]
    assert interp.context["n"] == 10


def test_plugins_see_each_expanded_action() -> None:
    """``on_action_execute`` reports the composite and every action it stands for."""
    recorder = Recorder()
    interp = Interp(create_machine(counter_chart(pure(lambda a: ["first", "second"])), LOGIC))
    interp.use(recorder).start()
    interp.send("GO")
    executed = [d for name, d in recorder.calls if name == "on_action_execute"]
    assert executed == ["xstate.pure", "first", "second"]


def test_self_feeding_composite_is_a_contained_runaway() -> None:
    """A callback that keeps enqueueing itself ends at the chain limit, not in RecursionError."""

    def again(a: Any) -> None:
        a["enqueue"](enqueue_actions(again))

    machine = create_machine(counter_chart(enqueue_actions(again)), LOGIC, chain_limit=50)
    interp = Interp(machine).start()
    interp.send("GO")
    assert isinstance(interp.last_error, RunawayChainError)
    assert interp.status == "running"


def test_missing_nested_action_is_a_contained_error() -> None:
    """A branch naming an action nobody defines fails like a missing action would."""
    interp = run(choose([{"actions": ["nowhere", "first"]}]))
    assert interp.context["log"] == []
    assert "nowhere" in str(interp.last_error)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"type": "choose", "params": {}}, "conditions"),
        ({"type": "choose", "params": {"conditions": [{"when": "x"}]}}, "branch"),
        (
            {"type": "choose", "params": {"conditions": [{"actions": [{"type": "raise"}]}]}},
            "missing",
        ),
        ({"type": "pure", "params": {"get": 3}}, "function"),
        ({"type": "enqueueActions", "params": {}}, "callback"),
        ({"type": "forwardTo", "params": {}}, "missing"),
        ({"type": "escalate", "params": {"error": "x", "to": "y"}}, "unknown"),
    ],
)
def test_malformed_built_ins_are_refused_at_create_machine(action: Any, message: str) -> None:
    """A JSON built-in with missing or wrong params fails where the chart is defined."""
    with pytest.raises(InvalidConfigError, match=message):
        create_machine(counter_chart(action), LOGIC)


def test_plugins_assignment_replaces_every_plugin() -> None:
    """``interp.plugins = [...]`` (0.11.0) replaces the set; a non-list is refused."""
    first, second = Recorder(), Recorder()
    interp = Interp(create_machine(counter_chart("first"), LOGIC)).use(first)
    interp.plugins = [second, second]
    assert interp.plugins == (second,)
    interp.start()
    interp.send("GO")
    assert first.calls == []
    assert "on_transition" in second.names()
    with pytest.raises(ArgumentTypeError, match="list"):
        interp.plugins = second


def test_get_persisted_snapshot_is_a_detached_json_dict() -> None:
    """The persisted snapshot is plain JSON data; changing it does not touch the machine."""
    interp = run(assign({"n": 7}))
    saved = interp.get_persisted_snapshot()
    assert json.loads(json.dumps(saved)) == saved
    saved["context"]["n"] = 0
    assert interp.context["n"] == 7
    restored = Interp.from_snapshot(interp.get_persisted_snapshot(), interp.machine)
    assert restored.context == interp.context


def timed_machine() -> Any:
    """'a' moves to 'b' after 30 ms, and 'b' finishes with an output."""
    return create_machine(
        {
            "id": "t",
            "initial": "a",
            "states": {
                "a": {"after": {"30": "b"}},
                "b": {"on": {"END": "done"}, "entry": raise_("END", delay=20)},
                "done": {"type": "final", "output": {"ok": True}},
            },
        }
    )


def test_wait_for_sync_ticks_a_sync_interpreter() -> None:
    """``wait_for_sync`` ticks a wall-clock SyncInterpreter until the state is active."""
    interp = SyncInterpreter(timed_machine(), clock=WallClock()).start()
    assert xsm_celery.wait_for_sync(interp, "t.b", timeout=5) is interp
    assert xsm_celery.wait_for_sync(interp, lambda i: i.status == "done", timeout=5) is interp
    assert interp.output == {"ok": True}


def test_wait_for_sync_times_out_and_gives_up_on_a_stopped_machine() -> None:
    """No progress within the timeout, or a stopped machine, is a WaitTimeoutError."""
    interp = SyncInterpreter(timed_machine(), clock=SimulatedClock()).start()
    with pytest.raises(WaitTimeoutError, match="not met in time"):
        xsm_celery.wait_for_sync(interp, "t.b", timeout=0.05)
    interp.stop()
    with pytest.raises(TimeoutError, match="can no longer"):
        xsm_celery.wait_for_sync(interp, "t.b", timeout=5)


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_wait_for_and_to_promise_functions(engine: str) -> None:
    """The module functions wait on either engine without blocking the loop."""

    async def scenario() -> Any:
        machine = timed_machine()
        if engine == "sync":
            interp: Any = SyncInterpreter(machine, clock=WallClock()).start()
        else:
            interp = await xsm_celery.Interpreter(machine, clock=WallClock()).start()
        ticks = 0

        async def other() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        spinner = asyncio.ensure_future(other())
        await xsm_celery.wait_for(interp, "t.b", timeout=5)
        output = await xsm_celery.to_promise(interp, timeout=5)
        spinner.cancel()
        return output, ticks

    output, ticks = asyncio.run(scenario())
    assert output == {"ok": True}
    assert ticks > 3


def test_wait_for_sync_refuses_to_block_its_own_loop() -> None:
    """On the loop that drives an async Interpreter, wait_for_sync would deadlock: refused."""

    async def scenario() -> None:
        interp = await xsm_celery.Interpreter(timed_machine(), clock=WallClock()).start()
        with pytest.raises(xsm_celery.ConfigurationError, match="await wait_for"):
            xsm_celery.wait_for_sync(interp, "t.b", timeout=1)
        await interp.stop()

    asyncio.run(scenario())


def test_log_creator_logs_on_both_engines(caplog: pytest.LogCaptureFixture) -> None:
    """``log`` (0.11.0's signature: expr, label) writes to the machine logger."""
    caplog.set_level(logging.INFO, logger="xsm_celery.machine")
    run(log(lambda a: f"n={a['context']['n']}", label="L"))
    assert "L: n=1" in caplog.text
