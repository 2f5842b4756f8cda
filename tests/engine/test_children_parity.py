"""Children behave alike on both engines: a failing child reaches onError whatever started its
step, stopChild unregisters, a spawned child's input reaches its context, and a restored
interpreter (children included) resumes with start() and takes events."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.engine.drivers import Interp
from tests.engine.test_child_machines import child_machine, parent_chart
from xsm_celery import (
    MachineLogic,
    SimulatedClock,
    WallClock,
    create_machine,
    from_callback,
)
from xsm_celery.actions import assign, send_to, spawn_child, stop_child


def watcher(child: Any, clock: Any = None) -> Any:
    """A started parent invoking ``child`` as 'kid'; onError keeps the error's type."""
    chart = {
        "id": "boss",
        "initial": "watching",
        "context": {},
        "states": {
            "watching": {
                "invoke": {
                    "src": "kid",
                    "id": "kid",
                    "onError": {
                        "target": "failed",
                        "actions": assign({"err": lambda a: type(a["event"].data).__name__}),
                    },
                },
                "on": {"POKE_KID": {"actions": send_to("kid", "GO")}},
            },
            "failed": {},
        },
    }
    machine = create_machine(chart, logic=MachineLogic(services={"kid": child}))
    return Interp(machine, clock=clock).start()


def assert_failed_to_parent(interp: Any, kid: Any) -> None:
    """The parent took onError with the child's error, and the child is stopped and gone."""
    assert interp.value == "failed"
    assert interp.context["err"] == "ImplementationMissingError"
    assert kid.status == "stopped"
    assert interp.children == {}


def test_a_child_whose_own_timer_step_raises_reaches_on_error() -> None:
    """A child's 'after' step that raises (an unknown guard) fails it to the parent."""
    clock = SimulatedClock()
    kid_machine = create_machine(
        {
            "id": "c",
            "initial": "a",
            "states": {"a": {"after": {"100": {"guard": "nope", "target": "b"}}}, "b": {}},
        }
    )
    interp = watcher(kid_machine, clock=clock)
    kid = interp.children["kid"].child
    clock.increment(100)
    assert_failed_to_parent(interp, kid)


def test_a_child_whose_callback_actor_event_raises_reaches_on_error() -> None:
    """An event a callback actor of the child posts, whose step raises, fails the child.

    The sync engine delivers the event at the clock's next increment, the async one on its
    loop (already during start), so only the parent's side is compared.
    """
    clock = SimulatedClock()

    def setup(send_back: Any, receive: Any, ctx: Any, event: Any) -> None:
        send_back("BOOM")

    kid_machine = create_machine(
        {
            "id": "c",
            "initial": "a",
            "states": {
                "a": {"invoke": {"src": "cb"}, "on": {"BOOM": {"guard": "nope", "target": "b"}}},
                "b": {},
            },
        },
        logic=MachineLogic(services={"cb": from_callback(setup)}),
    )
    interp = watcher(kid_machine, clock=clock)
    clock.increment(0)
    assert interp.value == "failed"
    assert interp.context["err"] == "ImplementationMissingError"
    assert interp.children == {}


def test_a_child_whose_service_result_step_raises_reaches_on_error() -> None:
    """An async service of the child finishing into a raising step fails the child.

    On the async engine the service's result runs the step on the loop; the sync engine
    refuses the async service, and its error's step raises the same way.
    """

    async def work(interp: Any, ctx: Any, event: Any) -> int:
        return 1

    failing = {"guard": "nope", "target": "b"}
    kid_machine = create_machine(
        {
            "id": "c",
            "initial": "a",
            "states": {
                "a": {"invoke": {"src": "work", "onDone": failing, "onError": failing}},
                "b": {},
            },
        },
        logic=MachineLogic(services={"work": work}),
    )
    interp = watcher(kid_machine)
    assert interp.value == "failed"
    assert interp.context["err"] == "ImplementationMissingError"
    assert interp.children == {}


def test_a_child_whose_step_on_the_parents_event_raises_reaches_on_error() -> None:
    """An event the parent sends (sendTo) whose step raises in the child fails the child."""
    kid_machine = create_machine(
        {
            "id": "c",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"guard": "nope", "target": "a"}}}},
        }
    )
    interp = watcher(kid_machine)
    kid = interp.children["kid"].child
    interp.send("POKE_KID")
    assert_failed_to_parent(interp, kid)


def counting_child(until: float) -> Any:
    """A child whose GO starts a chain of raised COUNTs that goes on while ``n < until``."""
    again = {"type": "raise", "params": {"event": "COUNT"}}
    return create_machine(
        {
            "id": "c",
            "initial": "a",
            "context": {"n": 0},
            "states": {
                "a": {
                    "on": {
                        "GO": {"actions": again},
                        "COUNT": {
                            "guard": "more",
                            "actions": [assign({"n": lambda a: a["context"]["n"] + 1}), again],
                        },
                    }
                }
            },
        },
        logic=MachineLogic(guards={"more": lambda ctx, e: ctx["n"] < until}),
    )


def test_a_child_whose_raise_chain_never_settles_reaches_on_error() -> None:
    """A child's self-feeding raise ends at the bound, as the child's failure: onError."""
    interp = watcher(counting_child(float("inf")))
    kid = interp.children["kid"].child
    interp.send("POKE_KID")
    assert interp.value == "failed"
    assert interp.context["err"] == "RunawayChainError"
    assert kid.status == "stopped"
    assert interp.children == {}


def test_a_childs_long_run_has_settled_when_the_parents_step_goes_on() -> None:
    """A child's run started by sendTo ends inside it, however long: the next action sees it."""
    chart = {
        "id": "boss",
        "initial": "a",
        "context": {},
        "states": {
            "a": {
                "invoke": {"src": "kid", "id": "kid"},
                "on": {"POKE_KID": {"actions": [send_to("kid", "GO"), "peek"]}},
            }
        },
    }

    def peek(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        ctx["seen"] = interp.children["kid"].child.context["n"]

    machine = create_machine(
        chart, logic=MachineLogic(services={"kid": counting_child(350)}, actions={"peek": peek})
    )
    interp = Interp(machine).start()
    interp.send("POKE_KID")
    assert interp.context["seen"] == 350


def spawner(clock: Any = None) -> Any:
    """A started parent that spawns 'worker' children by id and stops them with KILL."""
    chart = {
        "id": "boss",
        "initial": "a",
        "context": {"pings": []},
        "states": {
            "a": {
                "on": {
                    "SPAWN": {
                        "actions": spawn_child(
                            "worker",
                            actor_id="w1",
                            input=lambda a: {"job": a["event"].payload["job"]},
                        )
                    },
                    "SPAWN_JSON": {
                        "actions": {
                            "type": "spawnChild",
                            "params": {"src": "worker", "id": "w2", "input": {"job": 9}},
                        }
                    },
                    "KILL": {"actions": stop_child("w1")},
                    "PING": {"actions": assign({"pings": lambda a: [*a["context"]["pings"], "w"]})},
                    "done.invoke.w1": "b",
                }
            },
            "b": {},
        },
    }
    machine = create_machine(chart, logic=MachineLogic(services={"worker": child_machine()}))
    return Interp(machine, clock=clock).start()


def test_stop_child_unregisters_the_child_and_its_timers() -> None:
    """After stopChild the child is stopped, gone from children and the snapshot, and silent."""
    clock = SimulatedClock()
    interp = spawner(clock=clock)
    interp.send("SPAWN", job=1)
    kid = interp.children["w1"].child
    interp.send("KILL")
    assert kid.status == "stopped"
    assert interp.children == {}
    assert interp.snapshot()["children"] == {}
    interp.send_to("w1", "FINISH")
    clock.increment(5000)
    assert kid.status == "stopped"
    assert interp.value == "a"


def test_a_stopped_childs_id_can_be_spawned_again() -> None:
    """The id a stopped child had is free: a new child runs under it and can finish."""
    interp = spawner()
    interp.send("SPAWN", job=1)
    first = interp.children["w1"].child
    interp.send("KILL")
    interp.send("SPAWN", job=2)
    second = interp.children["w1"].child
    assert second is not first
    assert second.context["job"] == 2
    interp.send_to("w1", "FINISH")
    assert interp.value == "b"


def test_stop_child_of_a_restored_spawned_child() -> None:
    """A spawned child restored with its parent is stopped and unregistered by stopChild."""
    clock = SimulatedClock(wall_start=1000.0)
    interp = spawner(clock=clock)
    interp.send("SPAWN", job=4)
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, interp.machine, clock=clock).start()
    kid = restored.children["w1"].child
    assert kid.context["job"] == 4
    restored.send("KILL")
    assert kid.status == "stopped"
    assert restored.children == {}


def test_a_spawned_childs_input_reaches_its_context() -> None:
    """spawnChild's input, computed from the event or given in JSON, builds the child's context."""
    interp = spawner()
    interp.send("SPAWN", job=5)
    interp.send("SPAWN_JSON")
    assert interp.children["w1"].child.context == {"job": 5, "pings": 0}
    assert interp.children["w2"].child.context == {"job": 9, "pings": 0}
    assert interp.context["pings"] == ["w", "w"]


def test_a_restored_parent_resumes_with_start_and_takes_events() -> None:
    """Restore, start() (a no-op that returns it), send: the child and its timers go on."""
    clock = SimulatedClock(wall_start=1000.0)
    machine = create_machine(
        parent_chart(), logic=MachineLogic(services={"worker": child_machine()})
    )
    interp = Interp(machine, clock=clock).start()
    interp.send("GO")
    interp.send("POKE_KID")
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, machine, clock=clock)
    assert restored.start() == restored
    restored.send("POKE_KID")
    assert restored.children["kid"].child.context["pings"] == 2
    restored.send("FINISH_KID")
    assert restored.value == "finished"
    assert restored.context["out"] == {"ok": True}


def let_time_pass(interp: Any, seconds: float, ticked: Any = None) -> None:
    """Let wall time pass the way each engine notices it.

    The sync engine fires an interpreter's due timers when it is ticked (or sent an event):
    ``ticked``, by default ``interp``. The async one is woken by its event loop, so it is only
    given the loop, never ticked.
    """
    if Interp.is_async:
        interp.loop.run_until_complete(asyncio.sleep(seconds))
        interp.settle()
    else:
        time.sleep(seconds)
        (interp if ticked is None else ticked).tick()


def test_a_restored_interpreters_wall_clock_timers_fire_after_start() -> None:
    """Timers restored on a WallClock fire once the restored interpreter runs again."""
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"on": {"GO": "waiting"}},
                "waiting": {"after": {"30": "late"}},
                "late": {},
            },
        }
    )
    interp = Interp(machine, clock=WallClock()).start()
    interp.send("GO")
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, machine, clock=WallClock()).start()
    assert restored.value == "waiting"
    let_time_pass(restored, 0.1)
    assert restored.value == "late"


def test_a_restored_childs_wall_clock_timer_reaches_the_parent() -> None:
    """A restored child's WallClock timer fires and its output reaches the parent's onDone."""
    quick = create_machine(
        {
            "id": "worker",
            "initial": "busy",
            "states": {"busy": {"after": {"30": "done"}}, "done": {"type": "final", "output": 3}},
        }
    )
    chart = parent_chart()
    machine = create_machine(chart, logic=MachineLogic(services={"worker": quick}))
    interp = Interp(machine, clock=WallClock()).start()
    interp.send("GO")
    saved = interp.get_snapshot()
    interp.stop()
    restored = Interp.from_snapshot(saved, machine, clock=WallClock()).start()
    let_time_pass(restored, 0.1, ticked=restored.children["kid"].child)
    assert restored.value == "finished"
    assert restored.context["out"] == 3


def fetcher(service: Any) -> Any:
    """A machine whose 'loading' state invokes ``service``; onDone keeps the result."""
    return create_machine(
        {
            "id": "m",
            "initial": "idle",
            "context": {},
            "states": {
                "idle": {"on": {"LOAD": "loading"}},
                "loading": {
                    "invoke": {
                        "src": "fetch",
                        "onDone": {
                            "target": "ready",
                            "actions": assign({"got": lambda a: a["event"].data}),
                        },
                        "onError": "failed",
                    }
                },
                "ready": {},
                "failed": {},
            },
        },
        logic=MachineLogic(services={"fetch": service}),
    )


def test_restart_services_runs_the_invocation_again_on_restore() -> None:
    """restart_services=True starts the restored state's service again; its result arrives."""
    calls: list[str] = []

    def fetch(interp: Any, ctx: Any, event: Any) -> int:
        calls.append("fetch")
        return len(calls)

    machine = fetcher(fetch)
    saved = {**Interp(machine).start().snapshot(), "value": "loading", "state_ids": ["m.loading"]}
    restored = Interp.from_snapshot(saved, machine, restart_services=True).start()
    assert restored.value == "ready"
    assert restored.context["got"] == 1


def test_a_restored_async_interpreter_restarts_its_async_service_on_its_loop() -> None:
    """An async service restarted by a restore made outside the loop runs once the loop does."""
    if not Interp.is_async:
        pytest.skip("async services run on the async engine only")

    async def fetch(interp: Any, ctx: Any, event: Any) -> int:
        await asyncio.sleep(0)
        return 7

    machine = fetcher(fetch)
    saved = {**Interp(machine).start().snapshot(), "value": "loading", "state_ids": ["m.loading"]}
    restored = Interp.from_snapshot(saved, machine, restart_services=True)
    assert restored.value == "loading"
    restored.start()
    assert restored.value == "ready"
    assert restored.context["got"] == 7


def test_a_restored_async_service_left_unstarted_is_closed_on_stop() -> None:
    """Stopping a restored interpreter before it met a loop closes the pending coroutine."""
    if not Interp.is_async:
        pytest.skip("async services run on the async engine only")
    ran: list[str] = []

    async def fetch(interp: Any, ctx: Any, event: Any) -> int:
        ran.append("ran")
        return 7

    machine = fetcher(fetch)
    saved = {**Interp(machine).start().snapshot(), "value": "loading", "state_ids": ["m.loading"]}
    restored = Interp.from_snapshot(saved, machine, restart_services=True)
    restored.stop()
    restored.settle()
    assert ran == []
    assert restored.status == "stopped"
