"""'after' timers: literal and named delays, cancellation on exit, ordering, wall clocks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder
from xsm_celery import (
    MachineLogic,
    RunawayChainError,
    SimulatedClock,
    create_machine,
)
from xsm_celery.engine import WallClock


def timed(after: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A chart whose 'waiting' state has the given 'after' map."""
    return {
        "id": "m",
        "initial": "waiting",
        "context": {"log": []},
        "states": {
            "waiting": {"after": after, "on": {"LEAVE": "elsewhere"}, **extra},
            "elsewhere": {"on": {"BACK": "waiting"}},
            "timeout": {},
            "early": {},
            "late": {},
        },
    }


def test_literal_delay_fires_exactly_on_time() -> None:
    """after: {1000: ...} fires when the clock reaches 1000 ms, not a millisecond before."""
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"1000": "timeout"})), clock=clock).start()
    clock.increment(999)
    assert interp.value == "waiting"
    clock.increment(1)
    assert interp.value == "timeout"


@pytest.mark.parametrize("delay", [250, lambda ctx, e: ctx["ms"]])
def test_named_delay_number_or_callable(delay: Any) -> None:
    """A named delay may be a number or a function of (ctx, event)."""
    config = timed({"wait": "timeout"})
    config["context"]["ms"] = 250
    clock = SimulatedClock()
    logic = MachineLogic(delays={"wait": delay})
    interp = Interp(create_machine(config, logic=logic), clock=clock).start()
    clock.increment(249)
    assert interp.value == "waiting"
    clock.increment(1)
    assert interp.value == "timeout"


def test_timer_is_cancelled_when_its_state_exits() -> None:
    """Leaving the state before the delay cancels its timer for good."""
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"100": "timeout"})), clock=clock).start()
    clock.increment(50)
    interp.send("LEAVE")
    clock.increment(1000)
    assert interp.value == "elsewhere"
    assert interp.pending_timers() == []


def test_reentering_restarts_the_timer() -> None:
    """Coming back re-arms the timer from the moment of re-entry."""
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"100": "timeout"})), clock=clock).start()
    clock.increment(90)
    interp.send("LEAVE")
    interp.send("BACK")
    clock.increment(90)
    assert interp.value == "waiting"
    clock.increment(10)
    assert interp.value == "timeout"


def test_several_timers_in_one_state_fire_in_due_order() -> None:
    """With two delays the earlier one wins and cancels the later one by leaving."""
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"500": "late", "200": "early"})), clock=clock).start()
    clock.increment(10_000)
    assert interp.value == "early"


def test_guarded_timer_candidates() -> None:
    """A timer's candidate list is tried in order like any transition."""
    config = timed({"100": [{"guard": "never", "target": "early"}, {"target": "late"}]})
    logic = MachineLogic(guards={"never": lambda c, e: False})
    clock = SimulatedClock()
    interp = Interp(create_machine(config, logic=logic), clock=clock).start()
    clock.increment(100)
    assert interp.value == "late"


def test_timer_event_reaches_plugins_with_its_name() -> None:
    """A fired timer is an event named after.<delay>.<state id> that plugins see."""
    recorder = Recorder()
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"100": "timeout"})), clock=clock)
    interp.use(recorder).start()
    clock.increment(100)
    assert "after.100.m.waiting" in recorder.of("on_event_received")


def test_many_interpreters_on_one_clock_fire_in_global_order() -> None:
    """One SimulatedClock drives several interpreters, interleaving their timers by due time."""
    fired: list[str] = []
    config = timed({"d": "timeout"}, exit="log")
    clock = SimulatedClock()
    for name, ms in (("slow", 300), ("fast", 100), ("mid", 200)):
        logic = MachineLogic(
            delays={"d": ms}, actions={"log": lambda i, c, e, a, n=name: fired.append(n)}
        )
        Interp(create_machine(config, logic=logic), clock=clock).start()
    clock.increment(1000)
    assert fired == ["fast", "mid", "slow"]


def test_zero_delay_cycle_is_a_runaway() -> None:
    """Two states bouncing on after: 0 raise RunawayChainError from increment()."""
    config = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"after": {"0": "b"}}, "b": {"after": {"0": "a"}}},
    }
    clock = SimulatedClock()
    Interp(create_machine(config), clock=clock).start()
    with pytest.raises(RunawayChainError):
        clock.increment(0)


@pytest.mark.parametrize("bad", [-1, float("nan"), "soon", lambda c, e: 1 / 0])
def test_bad_delay_value_is_contained(bad: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A named delay that raises or gives a bad value logs an error and arms nothing."""
    config = timed({"d": "timeout"})
    machine = create_machine(config, logic=MachineLogic(delays={"d": 5}))
    machine.get_state("waiting").after[0].delay_fn = bad
    clock = SimulatedClock()
    interp = Interp(machine, clock=clock).start()
    clock.increment(1000)
    assert interp.value == "waiting"
    assert isinstance(interp.last_error, (ValueError, TypeError, ZeroDivisionError))
    assert "delay 'd' failed" in caplog.text


def test_stop_cancels_timers() -> None:
    """stop() cancels every pending timer."""
    clock = SimulatedClock()
    interp = Interp(create_machine(timed({"100": "timeout"})), clock=clock).start()
    interp.stop()
    clock.increment(1000)
    assert interp.value == "waiting"
    assert interp.pending_timers() == []


def test_wall_clock_timers_fire_on_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a WallClock a due timer fires on tick() (or the next send), never by itself."""
    now = [1_000.0]
    clock = WallClock()
    monkeypatch.setattr(clock, "now", lambda: now[0])
    interp = Interp(create_machine(timed({"100": "timeout"})), clock=clock).start()
    now[0] += 150
    assert interp.value == "waiting"
    interp.tick()
    assert interp.value == "timeout"


def test_wall_clock_due_timer_fires_before_the_next_event() -> None:
    """send() first fires timers that came due, then handles the event."""
    now = [0.0]

    class Manual(WallClock):
        def now(self) -> float:
            return now[0]

    interp = Interp(create_machine(timed({"100": "timeout"})), clock=Manual()).start()
    now[0] = 100
    interp.send("LEAVE")
    assert interp.value == "timeout"


def test_retry_chart_from_fixture_backs_off() -> None:
    """The seed's retry chart retries with growing delays and ends in done."""
    calls: list[float] = []
    clock = SimulatedClock()

    def work(interp: Any, ctx: Any, event: Any) -> str:
        calls.append(clock.now())
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    logic = MachineLogic(
        actions={
            "retryBump": lambda i, c, e, a: c.__setitem__("attempt", c["attempt"] + 1),
            "retryReset": lambda i, c, e, a: c.__setitem__("attempt", 0),
        },
        guards={"retryCanRetry": lambda c, e: c["attempt"] < 5},
        services={"work": work},
        delays={"retryDelay": lambda c, e: 100 * 2 ** (c["attempt"] - 1)},
    )
    interp = Interp(create_machine(load("retry"), logic=logic), clock=clock).start()
    clock.increment(10_000)
    assert interp.matches("job.done")
    assert calls == [0.0, 100.0, 300.0]


def test_cancelled_timers_do_not_pile_up() -> None:
    """Re-entering a timed state many times while another timer waits keeps the heap small."""
    config = {
        "id": "m",
        "type": "parallel",
        "states": {
            "slow": {"initial": "w", "states": {"w": {"after": {"999999": "d"}}, "d": {}}},
            "fast": {
                "initial": "x",
                "states": {
                    "x": {"after": {"1000": "x"}, "on": {"HOP": {"target": "x", "reenter": True}}}
                },
            },
        },
    }
    interp = Interp(create_machine(config), clock=SimulatedClock()).start()
    for _ in range(1000):
        interp.send("HOP")
    assert len(interp.pending_timers()) == 2
    assert len(interp._timer_heap) < 200
