"""Resilience events: breaker transitions and retry outcomes as typed records."""

from __future__ import annotations

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import RetryExhaustedError
from xsm_celery.hooks import Fact, FactKind
from xsm_celery.patterns import (
    CircuitBreaker,
    CircuitClosedEvent,
    CircuitClosedHook,
    CircuitHalfOpenedEvent,
    CircuitOpenedEvent,
    ResilienceEvent,
    RetryAttemptedEvent,
    RetryExhaustedEvent,
    RetryPolicy,
    call_with_retry,
    event_from_fact,
    on_event,
)


def fail() -> None:
    """A call that always fails."""
    raise ConnectionError("down")


def test_a_breaker_life_cycle_is_three_events() -> None:
    """Open, half-open and closed each arrive once, naming the breaker and the cause."""
    seen: list[ResilienceEvent] = []
    stops = [on_event(kind, seen.append) for kind in (CircuitOpenedEvent, CircuitHalfOpenedEvent)]
    stops.append(on_event(CircuitClosedEvent, seen.append))
    try:
        clock = SimulatedClock()
        breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=100, name="geo", clock=clock)
        with pytest.raises(ConnectionError):
            breaker.call(fail)
        clock.increment(100)
        assert breaker.call(lambda: "ok") == "ok"
    finally:
        for stop in stops:
            stop()
    assert [(type(e), e.breaker, e.previous_state, e.reason) for e in seen] == [  # type: ignore[attr-defined]
        (CircuitOpenedEvent, "geo", "closed", "failure"),
        (CircuitHalfOpenedEvent, "geo", "open", "cooldown"),
        (CircuitClosedEvent, "geo", "half_open", "success"),
    ]
    assert all(e.at > 0 for e in seen)


def test_a_reset_is_a_closed_event() -> None:
    """An operator reset of an open breaker reports ``reason='reset'``."""
    seen: list[CircuitClosedEvent] = []
    stop = on_event(CircuitClosedEvent, seen.append)
    try:
        breaker = CircuitBreaker(failure_threshold=1, clock=SimulatedClock())
        with pytest.raises(ConnectionError):
            breaker.call(fail)
        breaker.reset()
    finally:
        stop()
    assert [e.reason for e in seen] == ["reset"]


def test_retry_events() -> None:
    """An in-process retry loop reports each attempt and its exhaustion."""
    seen: list[ResilienceEvent] = []
    stops = [on_event(RetryAttemptedEvent, seen.append), on_event(RetryExhaustedEvent, seen.append)]
    try:
        with pytest.raises(RetryExhaustedError):
            call_with_retry(RetryPolicy(max_attempts=2, base_ms=0), fail)
    finally:
        for stop in stops:
            stop()
    assert [type(e) for e in seen] == [RetryAttemptedEvent, RetryExhaustedEvent]
    assert seen[1].attempts == 2  # type: ignore[attr-defined]


def test_a_chart_task_giving_up_is_retry_exhausted() -> None:
    """A ``GAVE_UP`` fact from the Celery task path maps to ``RetryExhaustedEvent``."""
    event = event_from_fact(
        Fact(FactKind.GAVE_UP, {"task": "shop.charge", "attempts": 5, "reason": "task_exhausted"})
    )
    assert event == RetryExhaustedEvent(
        call="shop.charge",
        attempts=5,
        reason="task_exhausted",
        at=event.at,  # type: ignore[union-attr]
    )


def test_other_facts_are_not_events() -> None:
    """Facts outside the resilience kinds translate to None."""
    assert event_from_fact(Fact(FactKind.TIMER_FIRED, {})) is None
    assert event_from_fact(Fact(FactKind.BREAKER_TRANSITION, {"to_state": "??"})) is None


def test_a_raising_callback_never_breaks_the_breaker() -> None:
    """A subscriber that raises is skipped; the breaker still opens."""

    def broken(event: CircuitOpenedEvent) -> None:
        raise RuntimeError("pager down")

    stop = on_event(CircuitOpenedEvent, broken)
    try:
        breaker = CircuitBreaker(failure_threshold=1, clock=SimulatedClock())
        with pytest.raises(ConnectionError):
            breaker.call(fail)
    finally:
        stop()
    assert breaker.state == "open"


def test_the_seed_hook_names_are_the_event_classes() -> None:
    """``CircuitClosedHook`` is ``CircuitClosedEvent``, so either name subscribes."""
    assert CircuitClosedHook is CircuitClosedEvent
