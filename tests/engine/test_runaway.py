"""Every input ends in a result or a named error: runaway chains, deep payloads, deep contexts.

Each test runs on both interpreters (``Interp``, see ``conftest.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.engine.drivers import Interp
from xsm_celery import Event, MachineLogic, create_machine
from xsm_celery.engine.context_model import MAX_CONTEXT_DEPTH
from xsm_celery.engine.events import MAX_EVENT_DEPTH
from xsm_celery.engine.machine import DEFAULT_MAX_ITERATIONS
from xsm_celery.errors import (
    ConfigurationError,
    ContextValidationError,
    InvalidEventError,
    RunawayChainError,
    SnapshotCorruptError,
)


def raise_event(event: str) -> dict[str, Any]:
    """The ``raise`` built-in for ``event``."""
    return {"type": "raise", "params": {"event": event}}


def ping_pong() -> dict[str, Any]:
    """PING raises PING: a chain that feeds itself."""
    return {
        "id": "m",
        "initial": "idle",
        "states": {
            "idle": {"on": {"GO": "ponging", "PING": {"actions": raise_event("PING")}}},
            "ponging": {},
        },
    }


def counting(limit: int) -> tuple[dict[str, Any], MachineLogic]:
    """TICK counts up and raises TICK again until ``n == limit``: ``limit`` microsteps."""
    chart = {
        "id": "m",
        "initial": "on",
        "context": {"n": 0},
        "states": {
            "on": {
                "on": {
                    "TICK": {"guard": "more", "actions": ["bump", raise_event("TICK")]},
                }
            }
        },
    }
    logic = MachineLogic(
        actions={"bump": lambda i, ctx, e, a: ctx.__setitem__("n", ctx["n"] + 1)},
        guards={"more": lambda ctx, e: ctx["n"] < limit},
    )
    return chart, logic


def nested(depth: int) -> Any:
    """A value ``depth`` dicts deep (``nested(1) == {}``)."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def test_a_self_raising_event_ends_in_runaway_chain_error_and_the_machine_goes_on() -> None:
    """PING raising PING stops at the default bound; the machine still takes events."""
    interp = Interp(create_machine(ping_pong())).start()
    with pytest.raises(RunawayChainError) as caught:
        interp.send("PING")
    assert caught.value.limit == DEFAULT_MAX_ITERATIONS
    assert interp.status == "running"
    interp.send("GO")
    assert interp.current_state_ids == {"m.ponging"}


@pytest.mark.parametrize(("bound", "fits"), [(40, True), (39, False)])
def test_max_iterations_bounds_a_raised_chain_exactly(bound: int, fits: bool) -> None:
    """A chain of 40 microsteps passes max_iterations=40 and is cut at 39."""
    chart, logic = counting(40)
    interp = Interp(create_machine(chart, logic=logic, max_iterations=bound)).start()
    if fits:
        interp.send("TICK")
        assert interp.context["n"] == 40
    else:
        with pytest.raises(RunawayChainError) as caught:
            interp.send("TICK")
        assert caught.value.limit == bound
        assert interp.context["n"] == bound


def test_a_long_chain_within_the_bound_costs_no_stack() -> None:
    """5,000 raised events in one send settle: the run loop does not recurse per event."""
    chart, logic = counting(5000)
    interp = Interp(create_machine(chart, logic=logic, max_iterations=10_000)).start()
    interp.send("TICK")
    assert interp.context["n"] == 5000


def test_the_chart_key_max_iterations_sets_the_bound() -> None:
    """0.11.0's root key ``maxIterations`` is read; the argument wins over it."""
    chart, logic = counting(40)
    machine = create_machine({**chart, "maxIterations": 10}, logic=logic)
    assert machine.max_iterations == 10
    assert machine.chain_limit == 10
    with pytest.raises(RunawayChainError):
        Interp(machine).start().send("TICK")
    argued = create_machine({**chart, "maxIterations": 10}, logic=logic, max_iterations=50)
    assert argued.max_iterations == 50
    strict = create_machine({**chart, "maxIterations": 10}, logic=logic, strict_config=True)
    assert strict.max_iterations == 10


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "100"])
def test_a_bound_that_is_not_a_positive_int_is_refused(bad: Any) -> None:
    """max_iterations, chain_limit and maxIterations refuse anything but a positive int."""
    chart, _ = counting(1)
    with pytest.raises(ConfigurationError, match="max_iterations"):
        create_machine(chart, max_iterations=bad)
    with pytest.raises(ConfigurationError, match="chain_limit"):
        create_machine(chart, chain_limit=bad)
    with pytest.raises(ConfigurationError, match="maxIterations"):
        create_machine({**chart, "maxIterations": bad})
    with pytest.raises(ConfigurationError, match="not both"):
        create_machine(chart, max_iterations=5, chain_limit=5)


def test_an_action_sending_to_its_own_machine_forever_is_cut() -> None:
    """An action that sends PING on PING (sendTo self) is a runaway of queued events."""
    chart = {"id": "m", "initial": "a", "states": {"a": {"on": {"PING": {"actions": "again"}}}}}
    logic = MachineLogic(actions={"again": lambda interp, ctx, e, a: interp.send("PING")})
    interp = Interp(create_machine(chart, logic=logic, max_iterations=30)).start()
    with pytest.raises(RunawayChainError, match="kept sending events"):
        interp.send("PING")
    assert interp.status == "running"


def test_a_done_event_loop_is_cut_at_start() -> None:
    """Two compound states whose onDone enters the other, each done on entry, never settle."""
    chart = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"initial": "f", "states": {"f": {"type": "final"}}, "onDone": "b"},
            "b": {"initial": "f", "states": {"f": {"type": "final"}}, "onDone": "a"},
        },
    }
    with pytest.raises(RunawayChainError) as caught:
        Interp(create_machine(chart, max_iterations=25)).start()
    assert caught.value.limit == 25


def test_an_entry_raise_loop_is_cut_at_start() -> None:
    """An initial state whose entry raises the event that re-enters it is cut in start()."""
    chart = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"entry": raise_event("AGAIN"), "on": {"AGAIN": {"target": "a", "reenter": True}}}
        },
    }
    with pytest.raises(RunawayChainError):
        Interp(create_machine(chart, max_iterations=50)).start()


@pytest.mark.parametrize(
    "shape",
    ["keywords", "mapping", "event"],
)
def test_a_payload_at_the_depth_limit_passes_and_one_level_more_is_refused(shape: str) -> None:
    """Payloads of MAX_EVENT_DEPTH levels (the payload dict included) run; deeper ones raise."""
    interp = Interp(create_machine(ping_pong())).start()

    def send(depth: int) -> None:
        data = nested(depth - 1)
        if shape == "keywords":
            interp.send("GO", data=data)
        elif shape == "mapping":
            interp.send({"type": "GO", "data": data})
        else:
            interp.send(Event("GO", {"data": data}))

    with pytest.raises(InvalidEventError, match=f"more than {MAX_EVENT_DEPTH}"):
        send(MAX_EVENT_DEPTH + 1)
    assert interp.current_state_ids == {"m.idle"}
    send(MAX_EVENT_DEPTH)
    assert interp.current_state_ids == {"m.ponging"}


def test_a_payload_that_contains_itself_is_refused() -> None:
    """A list holding itself is refused as too deep, not walked forever."""
    loop: list[Any] = []
    loop.append(loop)
    interp = Interp(create_machine(ping_pong())).start()
    with pytest.raises(InvalidEventError):
        interp.send("GO", items=loop)


def test_a_far_too_deep_payload_is_a_named_error_not_recursion() -> None:
    """10,000 levels, far past Python's recursion limit, still end in InvalidEventError."""
    interp = Interp(create_machine(ping_pong())).start()
    with pytest.raises(InvalidEventError):
        interp.send("GO", data=nested(10_000))


def test_a_chart_context_past_the_depth_limit_is_refused_at_build() -> None:
    """create_machine refuses a context one level past MAX_CONTEXT_DEPTH, accepts the limit."""
    chart = ping_pong()
    with pytest.raises(ContextValidationError, match=f"more than {MAX_CONTEXT_DEPTH}"):
        create_machine({**chart, "context": nested(MAX_CONTEXT_DEPTH + 1)})
    with pytest.raises(ContextValidationError):
        create_machine({**chart, "context": nested(10_000)})
    machine = create_machine({**chart, "context": nested(MAX_CONTEXT_DEPTH)})
    interp = Interp(machine).start()
    assert json.loads(interp.get_snapshot())["context"] == nested(MAX_CONTEXT_DEPTH)


def test_a_context_factory_returning_a_deep_context_is_refused() -> None:
    """A ``context`` callable's result is checked when the interpreter is created."""
    chart = {**ping_pong(), "context": lambda _: {"deep": nested(MAX_CONTEXT_DEPTH)}}
    with pytest.raises(ContextValidationError):
        Interp(create_machine(chart))


def test_an_action_that_nests_the_context_too_deep_fails_the_snapshot_by_name() -> None:
    """A context an action made too deep is refused when snapshotted, not in json."""

    def wrap(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx["doc"] = {"inner": ctx.get("doc", {})}

    chart = {"id": "m", "initial": "a", "states": {"a": {"on": {"WRAP": {"actions": "wrap"}}}}}
    interp = Interp(create_machine(chart, logic=MachineLogic(actions={"wrap": wrap}))).start()
    for _ in range(MAX_CONTEXT_DEPTH * 3):
        interp.send("WRAP")
    with pytest.raises(ContextValidationError):
        interp.get_snapshot()
    with pytest.raises(ContextValidationError):
        interp.snapshot()


def test_a_snapshot_with_a_deep_context_or_deep_json_is_refused_by_name() -> None:
    """Restoring a deep context raises ContextValidationError; unparseable nesting is corrupt."""
    machine = create_machine(ping_pong())
    good = json.loads(Interp(machine).start().get_snapshot())
    deep = {**good, "context": nested(MAX_CONTEXT_DEPTH + 1)}
    with pytest.raises(ContextValidationError):
        Interp.from_snapshot(json.dumps(deep), machine)
    with pytest.raises(SnapshotCorruptError):
        Interp.from_snapshot("[" * 10_000 + "]" * 10_000, machine)
