"""CircuitBreaker on one thread: states, counting, refusals, reset and close."""

from __future__ import annotations

import asyncio
import math
import threading
import tracemalloc
from typing import Any

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import InterpreterStoppedError, PolicyError
from xsm_celery.patterns import CircuitBreaker, CircuitOpenError


def boom() -> None:
    raise RuntimeError("upstream down")


def trip(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        with pytest.raises(RuntimeError):
            breaker.call(boom)


def test_seed_flow() -> None:
    """Two failures open it, the cooldown half-opens it, a probe success closes it."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_ms=1_000, clock=clock)
    trip(breaker, 2)
    assert breaker.state == "open"
    ran = []
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(lambda: ran.append(1))
    assert ran == []
    assert str(info.value).startswith("Circuit 'circuitBreaker' is open; call rejected")
    assert info.value.state == "open"
    assert info.value.name == "circuitBreaker"
    assert isinstance(info.value, PolicyError)
    clock.increment(1_001)
    assert breaker.state == "half_open"
    assert breaker.call(lambda: "recovered") == "recovered"
    assert breaker.state == "closed"
    assert breaker.opened_count == 1


def test_rejection_says_when_to_retry() -> None:
    """CircuitOpenError carries the time left in the cooldown."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=1_000, clock=clock)
    trip(breaker)
    clock.increment(400)
    with pytest.raises(CircuitOpenError) as info:
        breaker.call(lambda: None)
    assert info.value.retry_after_ms == pytest.approx(600)


def test_success_resets_consecutive_failures() -> None:
    """failures counts consecutive failures; a success zeroes it."""
    breaker = CircuitBreaker(failure_threshold=3, clock=SimulatedClock())
    trip(breaker, 2)
    assert breaker.failures == 2
    breaker.call(lambda: None)
    assert breaker.failures == 0
    trip(breaker, 2)
    assert breaker.state == "closed"


def test_probe_failure_reopens() -> None:
    """A failing probe sends the circuit back to open and counts another trip."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=100, clock=clock)
    trip(breaker)
    clock.increment(101)
    trip(breaker)
    assert breaker.state == "open"
    assert breaker.opened_count == 2


def test_only_listed_exceptions_count() -> None:
    """exceptions=(ValueError,): a KeyError propagates without touching the breaker."""
    breaker = CircuitBreaker(failure_threshold=1, exceptions=(ValueError,), clock=SimulatedClock())

    def key_error() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        breaker.call(key_error)
    assert (breaker.state, breaker.failures) == ("closed", 0)

    def value_error() -> None:
        raise ValueError("v")

    with pytest.raises(ValueError):
        breaker.call(value_error)
    assert breaker.state == "open"


@pytest.mark.parametrize(
    "exc_type", [KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit]
)
def test_control_flow_exceptions_are_never_counted(exc_type: type[BaseException]) -> None:
    """KeyboardInterrupt / SystemExit / CancelledError propagate and are not failures."""
    breaker = CircuitBreaker(
        failure_threshold=1, exceptions=(BaseException,), clock=SimulatedClock()
    )

    def stop() -> None:
        raise exc_type()

    with pytest.raises(exc_type):
        breaker.call(stop)
    assert (breaker.state, breaker.failures) == ("closed", 0)


def test_uncounted_exception_frees_the_probe_slot() -> None:
    """A probe that raises an uncounted exception gives its slot back (no stuck half-open)."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(
        failure_threshold=1, cooldown_ms=10, exceptions=(ValueError,), clock=clock
    )

    def value_error() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        breaker.call(value_error)
    clock.increment(11)

    def interrupted() -> None:
        raise KeyError("not a failure")

    with pytest.raises(KeyError):
        breaker.call(interrupted)
    assert breaker.state == "half_open"
    assert breaker.call(lambda: "ok") == "ok"
    assert breaker.state == "closed"


@pytest.mark.parametrize("cooldown", [math.nan, math.inf, -math.inf, -1, "10", None])
def test_bad_cooldown_is_refused(cooldown: Any) -> None:
    """cooldown_ms NaN / +-inf / negative raise ValueError."""
    with pytest.raises(ValueError, match="cooldown_ms"):
        CircuitBreaker(cooldown_ms=cooldown)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"failure_threshold": 1.5}, "failure_threshold"),
        ({"half_open_max_calls": 0}, "half_open_max_calls"),
        ({"success_threshold": 0}, "success_threshold"),
        ({"failure_rate_threshold": 0}, "failure_rate_threshold"),
        ({"failure_rate_threshold": 1.5}, "failure_rate_threshold"),
        ({"failure_rate_threshold": math.nan}, "failure_rate_threshold"),
        ({"window_size": 0}, "window_size"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], name: str) -> None:
    """Out-of-range arguments raise ValueError naming the argument."""
    with pytest.raises(ValueError, match=name):
        CircuitBreaker(**kwargs)


def test_exceptions_must_be_exception_classes() -> None:
    """exceptions= refuses non-exception values."""
    with pytest.raises(TypeError, match="exceptions"):
        CircuitBreaker(exceptions=("ValueError",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exceptions"):
        CircuitBreaker(exceptions=())


def test_call_after_close_is_refused() -> None:
    """call() / acall() after close() raise InterpreterStoppedError; the target never runs."""
    breaker = CircuitBreaker(clock=SimulatedClock())
    breaker.close()
    ran: list[int] = []
    with pytest.raises(InterpreterStoppedError, match="close"):
        breaker.call(lambda: ran.append(1))

    async def target() -> None:
        ran.append(2)

    with pytest.raises(InterpreterStoppedError):
        asyncio.run(breaker.acall(target))
    with pytest.raises(InterpreterStoppedError):
        breaker.reset()
    assert ran == []
    breaker.close()  # closing twice is harmless


def test_reset_from_open_keeps_the_lifetime_trip_count() -> None:
    """reset() closes an open circuit; opened_count survives; no cooldown timer is left."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=100, clock=clock)
    trip(breaker)
    breaker.reset()
    assert (breaker.state, breaker.opened_count, breaker.failures) == ("closed", 1, 0)
    clock.increment(1_000)
    assert breaker.state == "closed"


def test_reset_from_half_open_ignores_probes_in_flight() -> None:
    """A probe admitted before reset() reports into a dead window: its failure is dropped."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=100, clock=clock)
    trip(breaker)
    clock.increment(101)

    def probe() -> None:
        breaker.reset()
        raise RuntimeError("late failure from before the reset")

    with pytest.raises(RuntimeError):
        breaker.call(probe)
    assert (breaker.state, breaker.opened_count) == ("closed", 1)


def test_thousand_resets_leave_no_timers_or_threads() -> None:
    """1,000 trip/reset cycles: no cooldown fires afterwards and the thread count stays flat."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=50, clock=clock)
    threads = threading.active_count()
    for n in range(1_000):
        trip(breaker)
        if n % 2:
            clock.increment(51)
        breaker.reset()
    clock.increment(10_000)
    assert breaker.state == "closed"
    assert breaker.opened_count == 1_000
    assert threading.active_count() == threads


def test_late_success_from_before_the_trip_is_dropped() -> None:
    """A call admitted while closed that succeeds after open + half-open does not close it."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_ms=100, clock=clock)

    def slow_success() -> str:
        trip(breaker, 2)
        clock.increment(101)
        assert breaker.state == "half_open"
        return "late"

    assert breaker.call(slow_success) == "late"
    assert breaker.state == "half_open"


def test_late_failure_from_before_the_trip_is_dropped() -> None:
    """A call admitted while closed that fails after the circuit half-opened does not re-open it."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_ms=100, clock=clock)

    def slow_failure() -> None:
        trip(breaker, 2)
        clock.increment(101)
        raise RuntimeError("stale")

    with pytest.raises(RuntimeError):
        breaker.call(slow_failure)
    assert (breaker.state, breaker.opened_count) == ("half_open", 1)


def test_late_probe_success_after_reopen_is_dropped() -> None:
    """A probe's success arriving after another probe re-opened the circuit is ignored."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(
        failure_threshold=1, cooldown_ms=100, half_open_max_calls=2, clock=clock
    )
    trip(breaker)
    clock.increment(101)

    def slow_probe() -> str:
        trip(breaker)  # the second probe fails: open again
        return "late"

    assert breaker.call(slow_probe) == "late"
    assert (breaker.state, breaker.opened_count) == ("open", 2)


def test_success_threshold_needs_consecutive_probe_successes() -> None:
    """success_threshold=2 with one probe slot: two sequential probe successes close it."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=10, success_threshold=2, clock=clock)
    trip(breaker)
    clock.increment(11)
    breaker.call(lambda: None)
    assert breaker.state == "half_open"
    breaker.call(lambda: None)
    assert breaker.state == "closed"


def test_failure_rate_trips_over_a_full_window() -> None:
    """failure_rate_threshold=0.5 over 4 calls opens on an alternating pattern, once the window is full."""
    breaker = CircuitBreaker(
        failure_threshold=100, failure_rate_threshold=0.5, window_size=4, clock=SimulatedClock()
    )
    for _ in range(2):
        trip(breaker)
        breaker.call(lambda: None)
    assert breaker.state == "closed"  # window [F S F S]: rate judged on failures only
    trip(breaker)  # window [S F S F] = 0.5
    assert breaker.state == "open"


def test_failure_rate_off_never_trips_on_alternation() -> None:
    """Without a rate threshold, alternating outcomes never reach the consecutive threshold."""
    breaker = CircuitBreaker(failure_threshold=2, clock=SimulatedClock())
    for _ in range(50):
        trip(breaker)
        breaker.call(lambda: None)
    assert breaker.state == "closed"


def test_failure_rate_below_threshold_stays_closed() -> None:
    """A rate under the threshold over a full window keeps the circuit closed."""
    breaker = CircuitBreaker(
        failure_threshold=100, failure_rate_threshold=0.5, window_size=4, clock=SimulatedClock()
    )
    for _ in range(10):
        trip(breaker)
        for _ in range(3):
            breaker.call(lambda: None)
    assert breaker.state == "closed"


def test_closed_success_does_not_step_the_chart() -> None:
    """A success while closed with nothing to reset sends no event to the chart."""
    from xsm_celery.engine import PluginBase

    class Count(PluginBase):
        def __init__(self) -> None:
            self.events: list[str] = []

        def on_event_received(self, interpreter: Any, event: Any) -> None:
            self.events.append(event.type)

    counter = Count()
    breaker = CircuitBreaker(plugins=[counter], clock=SimulatedClock())
    for _ in range(1_000):
        breaker.call(lambda: None)
    assert counter.events == []
    trip(breaker)
    breaker.call(lambda: None)
    assert counter.events == ["FAILURE", "SUCCESS"]


def test_name_is_the_chart_id() -> None:
    """name= appears in the error and as the internal machine's id."""
    breaker = CircuitBreaker(failure_threshold=1, name="payments", clock=SimulatedClock())
    trip(breaker)
    with pytest.raises(CircuitOpenError, match="Circuit 'payments' is open"):
        breaker.call(lambda: None)
    assert breaker.interpreter.id == "payments"


def test_hundred_thousand_closed_calls_do_not_grow() -> None:
    """100,000 closed calls: memory growth from N/2 to N stays under 64 KB."""
    breaker = CircuitBreaker(clock=SimulatedClock())
    tracemalloc.start()
    try:
        for _ in range(50_000):
            breaker.call(lambda: None)
        half = tracemalloc.get_traced_memory()[0]
        for _ in range(50_000):
            breaker.call(lambda: None)
        full = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert full - half < 64 * 1024


def test_logging_inspector_shows_every_trip(caplog: pytest.LogCaptureFixture) -> None:
    """plugins= attach to the internal interpreter: a LoggingInspector logs the trip."""
    import logging

    from xsm_celery.engine import LoggingInspector

    caplog.set_level(logging.INFO, logger="xsm_celery.inspector")
    breaker = CircuitBreaker(
        failure_threshold=1, plugins=[LoggingInspector()], name="pay", clock=SimulatedClock()
    )
    trip(breaker)
    assert "open" in caplog.text
    assert "pay" in caplog.text
