"""Pure transitions: the next snapshot and the actions an event would run, nothing run.

``get_next_snapshot`` / ``pure_transition`` take the interpreter's own step, so for any
chart and events they reach the configuration an interpreter reaches; they never call an
action, a service or a clock, and never change the snapshot they start from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from tests.engine.drivers import Interp
from tests.strategies import chart_logic, charts, events
from xsm_celery import (
    ImplementationMissingError,
    MachineLogic,
    PureSnapshot,
    RunawayChainError,
    SimulatedClock,
    SnapshotCorruptError,
    SyncInterpreter,
    create_machine,
    get_initial_snapshot,
    get_next_snapshot,
    initial_transition,
    pure_transition,
)
from xsm_celery.actions import assign, choose, enqueue_actions, raise_

FIXTURES = Path(__file__).parent / "fixtures" / "v011"


class Calls:
    """Logic whose every action and service records that it ran (it must not, here)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def logic(self, **guards: Any) -> MachineLogic:
        def action(name: str) -> Any:
            return lambda i, ctx, e, a: self.ran.append(name)

        return MachineLogic(
            actions={n: action(n) for n in ("hello", "bye", "notify", "bigAct", "final")},
            services={"svc": lambda i, ctx, e: self.ran.append("svc")},
            guards=guards,
        )


ORDER = {
    "id": "m",
    "initial": "a",
    "context": {"n": 0},
    "states": {
        "a": {
            "entry": ["hello"],
            "exit": ["bye"],
            "after": {"1000": "b"},
            "on": {
                "GO": {
                    "target": "b",
                    "actions": [
                        assign({"n": lambda a: a["context"]["n"] + a["event"].payload["by"]}),
                        raise_("PING"),
                        raise_("LATER", delay=500),
                        "notify",
                        choose([{"guard": "big", "actions": ["bigAct"]}]),
                    ],
                }
            },
        },
        "b": {
            "invoke": {"src": "svc", "id": "w"},
            "on": {
                "PING": {
                    "target": "c",
                    "actions": enqueue_actions(
                        lambda x: (x["enqueue"].assign({"n": 9}), x["enqueue"]("final"))
                    ),
                }
            },
        },
        "c": {"type": "final", "output": {"ok": 1}},
    },
}


def test_initial_transition_lists_entry_actions_and_timers() -> None:
    """The initial snapshot is start()'s; entry actions and the armed timer are listed."""
    calls = Calls()
    machine = create_machine(ORDER, calls.logic(big=lambda c, e: c["n"] > 5))
    snapshot, actions = initial_transition(machine)
    assert snapshot.state_ids == {"m.a"}
    assert snapshot.value == "a"
    assert snapshot.status == "active"
    assert [(a.type, a.params) for a in actions] == [
        ("hello", None),
        ("xstate.raise", {"event": "after.1000.m.a", "delay": 1000.0, "id": "after.1000.m.a"}),
    ]
    assert calls.ran == []


def test_next_snapshot_applies_assign_and_raise_and_lists_the_rest() -> None:
    """assign and an undelayed raise change the snapshot; every other action is listed in
    exit, transition, entry order, with timers and services described, none of it run."""
    calls = Calls()
    machine = create_machine(ORDER, calls.logic(big=lambda c, e: c["n"] > 5))
    start = get_initial_snapshot(machine)
    after, actions = pure_transition(machine, start, {"type": "GO", "by": 7})
    assert after.state_ids == {"m.c"}
    assert after.status == "done"
    assert after.output == {"ok": 1}
    assert after.context == {"n": 9}
    assert [a.type for a in actions] == [
        "bye",
        "xstate.cancel",
        "xstate.raise",
        "notify",
        "bigAct",
        "xstate.spawnChild",
        "xstate.stopChild",
        "final",
    ]
    assert actions[2].params["delay"] == 500
    assert calls.ran == []
    assert start.context == {"n": 0}
    assert start.state_ids == {"m.a"}


def test_guards_decide_and_get_next_snapshot_drops_the_actions() -> None:
    """The same event takes another branch when the guard says so."""
    machine = create_machine(ORDER, Calls().logic(big=lambda c, e: c["n"] > 5))
    _, actions = pure_transition(machine, get_initial_snapshot(machine), {"type": "GO", "by": 1})
    assert "bigAct" not in [a.type for a in actions]
    assert isinstance(
        get_next_snapshot(machine, get_initial_snapshot(machine), "NOPE"), PureSnapshot
    )


def test_unhandled_event_changes_nothing() -> None:
    """An event no state handles gives an equal snapshot and no actions."""
    machine = create_machine(ORDER, Calls().logic(big=lambda c, e: False))
    start = get_initial_snapshot(machine)
    after, actions = pure_transition(machine, start, "NOPE")
    assert (after.state_ids, after.context, actions) == (start.state_ids, start.context, [])


def test_missing_actions_are_fine_but_a_missing_guard_is_not() -> None:
    """Actions are only listed, so the chart needs no code for them; guards must exist."""
    machine = create_machine(ORDER)
    assert get_initial_snapshot(machine).state_ids == {"m.a"}
    with pytest.raises(ImplementationMissingError, match="big"):
        pure_transition(machine, get_initial_snapshot(machine), {"type": "GO", "by": 1})


def test_history_and_parallel_done_events() -> None:
    """Deep history is recorded and re-entered; regions finishing raise done events."""
    chart = {
        "id": "h",
        "initial": "work",
        "states": {
            "work": {
                "initial": "x",
                "on": {"OUT": "away"},
                "states": {
                    "x": {"on": {"NEXT": "y"}},
                    "y": {
                        "type": "parallel",
                        "onDone": "#h.finished",
                        "states": {
                            "r1": {
                                "initial": "p",
                                "states": {"p": {"on": {"F": "q"}}, "q": {"type": "final"}},
                            },
                            "r2": {
                                "initial": "p",
                                "states": {"p": {"on": {"F": "q"}}, "q": {"type": "final"}},
                            },
                        },
                    },
                    "hist": {"type": "history", "history": "deep"},
                },
            },
            "away": {"on": {"BACK": "work.hist"}},
            "finished": {"type": "final"},
        },
    }
    machine = create_machine(chart)
    snap = get_initial_snapshot(machine)
    for event in ("NEXT", "OUT"):
        snap = get_next_snapshot(machine, snap, event)
    assert snap.history == {"h.work.hist": ["h.work.y.r1.p", "h.work.y.r2.p"]}
    snap = get_next_snapshot(machine, snap, "BACK")
    assert snap.state_ids == {"h.work.y.r1.p", "h.work.y.r2.p"}
    assert snap.matches("h.work.y")
    snap = get_next_snapshot(machine, snap, "F")
    assert snap.state_ids == {"h.finished"}
    assert snap.status == "done"


def test_runaway_chain_raises() -> None:
    """An always loop is RunawayChainError here too, at the machine's chain limit."""
    chart = {
        "id": "r",
        "initial": "a",
        "states": {"a": {"on": {"GO": "b"}}, "b": {"always": "c"}, "c": {"always": "b"}},
    }
    machine = create_machine(chart, chain_limit=20)
    with pytest.raises(RunawayChainError):
        get_next_snapshot(machine, get_initial_snapshot(machine), "GO")


def test_from_an_interpreter_leaves_it_untouched() -> None:
    """A running interpreter is a snapshot source: its state is copied, it is not stepped."""
    calls = Calls()
    machine = create_machine(ORDER, calls.logic(big=lambda c, e: False))
    interp = Interp(machine, clock=SimulatedClock()).start()
    calls.ran.clear()
    real = getattr(interp, "interp", interp)  # the async driver's handle wraps it
    after = get_next_snapshot(machine, real, {"type": "GO", "by": 2})
    assert after.state_ids == {"m.c"}
    assert interp.current_state_ids == {"m.a"}
    assert interp.context == {"n": 0}
    assert calls.ran == []


def test_dry_run_from_a_stored_snapshot() -> None:
    """A persisted snapshot (this engine's JSON, or 0.11.0's) is a starting point too."""
    machine = create_machine(ORDER, Calls().logic(big=lambda c, e: False))
    stored = SyncInterpreter(machine, clock=SimulatedClock()).start().get_snapshot()
    assert get_next_snapshot(machine, stored, {"type": "GO", "by": 1}).status == "done"
    case = json.loads((FIXTURES / "nested_history.json").read_text())
    v011 = create_machine(case["chart"])
    assert get_next_snapshot(v011, case["snapshot"], "RESUME").state_ids == {"job.work.parse.body"}
    with pytest.raises(SnapshotCorruptError):
        get_next_snapshot(machine, case["snapshot"], "GO")


@settings(derandomize=True, max_examples=150, deadline=None)
@given(chart=charts(), sent=events())
def test_pure_steps_reach_what_the_interpreter_reaches(
    chart: dict[str, Any], sent: list[tuple[str, bool]]
) -> None:
    """For random charts and events, the pure chain ends where SyncInterpreter ends, with
    no action run (the context stays empty), and never changes its input snapshots."""
    machine = create_machine(chart, chart_logic())
    interp = SyncInterpreter(machine, clock=SimulatedClock()).start()
    snap = get_initial_snapshot(machine)
    assert snap.state_ids == interp.current_state_ids
    for event_type, coin in sent:
        before = (snap.state_ids, snap.history)
        nxt = get_next_snapshot(machine, snap, {"type": event_type, "coin": coin})
        assert (snap.state_ids, snap.history) == before
        interp.send(event_type, coin=coin)
        snap = nxt
        assert snap.state_ids == interp.current_state_ids
        assert snap.status == ("done" if interp.status == "done" else "active")
        assert snap.history == {h.id: [s.id for s in kept] for h, kept in interp._history.items()}
    assert snap.context == {}
