"""Graph tools: reachable states, shortest and simple paths, transition coverage.

Hand-written charts pin exact paths (compound with ``onDone``, parallel regions, guards taken
either way, final states, timers, invocations); a property test over generated charts replays
every shortest path on the real interpreter and compares its length with a breadth-first
search of its own over that interpreter.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import xsm_celery
from tests.strategies import EVENTS, chart_logic, charts
from xsm_celery import MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.engine.graph import (
    reachable_states,
    shortest_paths,
    simple_paths,
    transition_coverage_targets,
    transition_paths,
)
from xsm_celery.engine.graph_model import Path, Step, forceable, forced_guards
from xsm_celery.errors import ConfigurationError, ExplorationLimitError

GUARDED = {
    "id": "m",
    "initial": "idle",
    "states": {
        "idle": {
            "on": {
                "GO": [{"target": "busy", "guard": "ok"}, {"target": "failed"}],
                "NOTE": {"actions": "note"},
            }
        },
        "busy": {"after": {"1000": "done"}, "on": {"BACK": "idle"}},
        "failed": {"type": "final"},
        "done": {"type": "final"},
    },
}

COMPOUND = {
    "id": "job",
    "initial": "work",
    "states": {
        "work": {
            "initial": "fetch",
            "states": {
                "fetch": {"on": {"GOT": "parse"}},
                "parse": {"on": {"OK": "end"}},
                "end": {"type": "final"},
            },
            "onDone": "done",
            "on": {"ABORT": "aborted"},
        },
        "done": {"type": "final"},
        "aborted": {"type": "final"},
    },
}

PARALLEL = {
    "id": "p",
    "type": "parallel",
    "states": {
        "a": {
            "initial": "a1",
            "states": {
                "a1": {"on": {"X": "a2"}},
                "a2": {"always": {"target": "a3", "guard": "g"}},
                "a3": {"type": "final"},
            },
        },
        "b": {
            "initial": "b1",
            "states": {
                "b1": {"on": {"Y": "b2"}},
                "b2": {"invoke": {"src": "svc", "onDone": "b3", "onError": "b1"}},
                "b3": {"type": "final"},
            },
        },
    },
}


def _table(paths: dict[frozenset[str], Path]) -> dict[tuple[str, ...], str]:
    return {tuple(sorted(k)): p.event_string() for k, p in paths.items()}


def test_guards_taken_either_way_by_default() -> None:
    """Both branches of a guarded GO are reached; the refused one records its assumption."""
    paths = shortest_paths(create_machine(GUARDED))
    assert _table(paths) == {
        ("m.idle",): "",
        ("m.busy",): "GO",
        ("m.failed",): "GO",
        ("m.done",): "GO,+1000",
    }
    assert paths[frozenset({"m.failed"})].steps == (
        Step("GO", None, frozenset({"m.idle"}), frozenset({"m.failed"}), ("guard:ok=False",)),
    )
    assert paths[frozenset({"m.done"})].steps[1] == Step(
        None, 1000.0, frozenset({"m.busy"}), frozenset({"m.done"})
    )
    assert paths[frozenset({"m.done"})].total_delay_ms == 1000.0


@pytest.mark.parametrize(
    ("guards", "expected"),
    [
        ("true", {"m", "m.idle", "m.busy", "m.done"}),
        ("false", {"m", "m.idle", "m.failed"}),
        ("both", {"m", "m.idle", "m.busy", "m.done", "m.failed"}),
    ],
)
def test_guard_modes(guards: str, expected: set[str]) -> None:
    """Forcing every guard one way prunes the other branch."""
    assert reachable_states(create_machine(GUARDED), guards=guards) == expected


def test_a_predicate_decides_the_guards() -> None:
    """A predicate sees the guard's name and the event; its answer is the only branch."""
    asked: list[tuple[str, str]] = []

    def predicate(name: str, ctx: Any, event: Any) -> bool:
        asked.append((name, event.type))
        return False

    reached = reachable_states(create_machine(GUARDED), guards=predicate)
    assert reached == {"m", "m.idle", "m.failed"}
    assert ("ok", "GO") in asked


def test_compound_states_and_on_done() -> None:
    """A compound state's final child raises its onDone at once, so it is never a resting place."""
    machine = create_machine(COMPOUND)
    assert _table(shortest_paths(machine)) == {
        ("job.work.fetch",): "",
        ("job.work.parse",): "GOT",
        ("job.aborted",): "ABORT",
        ("job.done",): "GOT,OK",
    }
    assert reachable_states(machine) == {
        "job",
        "job.work",
        "job.work.fetch",
        "job.work.parse",
        "job.done",
        "job.aborted",
    }


def test_parallel_regions_multiply_and_invocations_are_steps() -> None:
    """Each region moves on its own; an invocation waits until a step delivers its result."""
    paths = shortest_paths(create_machine(PARALLEL))
    assert _table(paths) == {
        ("p.a.a1", "p.b.b1"): "",
        ("p.a.a3", "p.b.b1"): "X",
        ("p.a.a2", "p.b.b1"): "X",
        ("p.a.a1", "p.b.b2"): "Y",
        ("p.a.a2", "p.b.b2"): "X,Y",
        ("p.a.a3", "p.b.b2"): "X,Y",
        ("p.a.a1", "p.b.b3"): "Y,done.invoke.p.b.b2",
        ("p.a.a2", "p.b.b3"): "X,Y,done.invoke.p.b.b2",
        ("p.a.a3", "p.b.b3"): "X,Y,done.invoke.p.b.b2",
    }
    stuck = paths[frozenset({"p.a.a2", "p.b.b1"})]
    assert stuck.steps[0].assumptions == ("guard:g=False",)


def test_time_weight_prefers_less_waiting() -> None:
    """By steps one long timer wins; by time two events and a short timer do."""
    chart = {
        "id": "t",
        "initial": "a",
        "states": {
            "a": {"after": {"5000": "goal"}, "on": {"X": "b"}},
            "b": {"after": {"100": "goal"}},
            "goal": {"type": "final"},
        },
    }
    machine = create_machine(chart)
    goal = frozenset({"t.goal"})
    assert shortest_paths(machine)[goal].event_string() == "+5000"
    assert shortest_paths(machine, weight="time")[goal].event_string() == "X,+100"


def test_a_named_delay_the_logic_lacks_is_an_assumption() -> None:
    """Without its value the step says so; with it, the step carries the real delay."""
    chart = {
        "id": "d",
        "initial": "wait",
        "states": {"wait": {"after": {"patience": "gone"}}, "gone": {"type": "final"}},
    }
    unknown = shortest_paths(create_machine(chart))[frozenset({"d.gone"})].steps[0]
    assert (unknown.delay_ms, unknown.assumptions) == (None, ("delay:patience=unknown",))
    assert shortest_paths(create_machine(chart))[frozenset({"d.gone"})].event_string() == "+?"
    known = create_machine(chart, logic=MachineLogic(delays={"patience": 250}))
    assert shortest_paths(known)[frozenset({"d.gone"})].event_string() == "+250"


def test_exploration_runs_none_of_the_charts_actions() -> None:
    """Custom actions are stand-ins while exploring: the user's code is never called."""
    calls: list[str] = []
    logic = MachineLogic(actions={"note": lambda *a: calls.append("note")}, guards={"ok": bool})
    machine = create_machine(GUARDED, logic=logic)
    assert len(simple_paths(machine)) == 3
    assert calls == []


def test_simple_paths_never_revisit_a_configuration() -> None:
    """Every non-empty path without a repeated configuration, depth first."""
    found = [
        (p.event_string(), sorted(p.final_states)) for p in simple_paths(create_machine(GUARDED))
    ]
    assert found == [
        ("GO", ["m.busy"]),
        ("GO,+1000", ["m.done"]),
        ("GO", ["m.failed"]),
    ]
    assert len(simple_paths(create_machine(GUARDED), max_paths=2)) == 2


def test_coverage_targets_are_read_from_the_chart() -> None:
    """One (source, label, target) per transition target; targetless ones point back."""
    assert transition_coverage_targets(create_machine(GUARDED)) == {
        ("m.idle", "on 'GO'", "m.busy"),
        ("m.idle", "on 'GO'", "m.failed"),
        ("m.idle", "on 'NOTE'", "m.idle"),
        ("m.busy", "on 'BACK'", "m.idle"),
        ("m.busy", "after 1000", "m.done"),
    }
    assert transition_coverage_targets(create_machine(PARALLEL)) == {
        ("p.a.a1", "on 'X'", "p.a.a2"),
        ("p.a.a2", "always", "p.a.a3"),
        ("p.b.b1", "on 'Y'", "p.b.b2"),
        ("p.b.b2", "invoke 'svc' onDone", "p.b.b3"),
        ("p.b.b2", "invoke 'svc' onError", "p.b.b1"),
    }
    assert ("job.work", "onDone", "job.done") in transition_coverage_targets(
        create_machine(COMPOUND)
    )


def test_transition_paths_end_in_the_transition() -> None:
    """Each coverable transition has a shortest path whose last step takes it."""
    found = {t: p.event_string() for t, p in transition_paths(create_machine(PARALLEL)).items()}
    assert found == {
        ("p.a.a1", "on 'X'", "p.a.a2"): "X",
        ("p.a.a2", "always", "p.a.a3"): "X",
        ("p.b.b1", "on 'Y'", "p.b.b2"): "Y",
        ("p.b.b2", "invoke 'svc' onDone", "p.b.b3"): "Y,done.invoke.p.b.b2",
        ("p.b.b2", "invoke 'svc' onError", "p.b.b1"): "Y,error.platform.p.b.b2",
    }


def test_bad_arguments_and_the_configuration_bound() -> None:
    """Unknown modes are refused with the choices; too many configurations is a named error."""
    machine = create_machine(PARALLEL)
    with pytest.raises(ConfigurationError, match="guards must be one of"):
        shortest_paths(machine, guards="maybe")
    with pytest.raises(ConfigurationError, match="weight must be one of"):
        shortest_paths(machine, weight="cost")
    with pytest.raises(ConfigurationError, match="max_depth must be >= 0"):
        shortest_paths(machine, max_depth=-1)
    with pytest.raises(ExplorationLimitError, match="more than 3 configurations") as info:
        shortest_paths(machine, max_configs=3)
    assert info.value.limit == 3
    assert _table(shortest_paths(machine, max_depth=1)) == {
        ("p.a.a1", "p.b.b1"): "",
        ("p.a.a3", "p.b.b1"): "X",
        ("p.a.a2", "p.b.b1"): "X",
        ("p.a.a1", "p.b.b2"): "Y",
    }


def test_replay_forces_guards_only_on_a_forceable_machine() -> None:
    """The refused branch replays on forceable(machine); the chart's own guard decides elsewhere."""
    logic = MachineLogic(actions={"note": lambda *a: None}, guards={"ok": lambda c, e: True})
    machine = create_machine(GUARDED, logic=logic)
    path = shortest_paths(machine)[frozenset({"m.failed"})]
    forced = SyncInterpreter(forceable(machine), clock=SimulatedClock())
    path.replay(forced, forced.clock)  # type: ignore[arg-type]
    assert forced.current_state_ids == {"m.failed"}
    plain = SyncInterpreter(machine, clock=SimulatedClock())
    path.replay(plain, plain.clock)  # type: ignore[arg-type]
    assert plain.current_state_ids == {"m.busy"}
    outside = SyncInterpreter(forceable(machine), clock=SimulatedClock()).start()
    outside.send("GO")
    assert outside.current_state_ids == {"m.busy"}
    with forced_guards(frozenset({"ok"})):
        again = SyncInterpreter(forceable(machine), clock=SimulatedClock()).start()
        again.send("GO")
    assert again.current_state_ids == {"m.failed"}


def test_the_top_level_exports_them() -> None:
    """0.11.0's graph names import from the package itself."""
    assert xsm_celery.shortest_paths is shortest_paths
    assert xsm_celery.reachable_states is reachable_states
    assert xsm_celery.simple_paths is simple_paths
    assert xsm_celery.transition_coverage_targets is transition_coverage_targets
    assert (xsm_celery.Path, xsm_celery.Step) == (Path, Step)


REFUSALS: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"coin"}),
    frozenset({"never"}),
    frozenset({"coin", "never"}),
)


def _fresh(machine: Any) -> tuple[SyncInterpreter, SimulatedClock]:
    clock = SimulatedClock()
    return SyncInterpreter(machine, clock=clock).start(), clock


def _advance(interp: SyncInterpreter, clock: SimulatedClock) -> bool:
    pending = interp.pending_timers()
    if not pending:
        return False
    clock.increment(max(0.0, pending[0].due - clock.now()))
    return True


def _bfs_depths(machine: Any, max_depth: int) -> dict[frozenset[str], int]:
    """Distances over the real interpreter: every event under every guard refusal, and time."""
    moves: list[tuple[str | None, frozenset[str]]] = [
        (event, refused) for event in EVENTS for refused in REFUSALS
    ]
    moves += [(None, refused) for refused in REFUSALS]
    start, _ = _fresh(machine)
    depths = {frozenset(start.current_state_ids): 0}
    queue: deque[tuple[Any, ...]] = deque([()])
    while queue:
        trail = queue.popleft()
        if len(trail) >= max_depth:
            continue
        for move in moves:
            interp, clock = _fresh(machine)
            for event, refused in (*trail, move):
                if interp.status != "running":
                    break
                with forced_guards(refused):
                    if event is None:
                        _advance(interp, clock)
                    else:
                        interp.send(event)
            reached = frozenset(interp.current_state_ids)
            if reached not in depths:
                depths[reached] = len(trail) + 1
                queue.append((*trail, move))
    return depths


@settings(
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(charts())
def test_shortest_paths_replay_and_are_minimal(chart: dict[str, Any]) -> None:
    """Each path reaches its configuration on the real interpreter, in as few steps as BFS."""
    machine = forceable(create_machine(chart, logic=chart_logic()))
    max_depth = 4
    paths = shortest_paths(machine, max_depth=max_depth)
    for key, path in paths.items():
        interp, clock = _fresh(machine)
        path.replay(interp, clock)
        assert frozenset(interp.current_state_ids) == key, path
    depths = _bfs_depths(machine, max_depth)
    assert {k: len(p.steps) for k, p in paths.items()} == depths
