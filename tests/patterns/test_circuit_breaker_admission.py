"""``CircuitBreaker.admit`` / ``record`` / ``release``, the presets' siblings, and transition facts."""

from __future__ import annotations

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import CircuitOpenError
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import CircuitBreaker


def test_admit_and_record_drive_the_same_chart_as_call() -> None:
    """Two recorded failures open a breaker of threshold two; admit then refuses with a wait."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_ms=1_000, clock=clock)
    for _ in range(2):
        breaker.record(breaker.admit(), ConnectionError("down"))
    assert breaker.state == "open"
    clock.increment(400)
    with pytest.raises(CircuitOpenError) as info:
        breaker.admit()
    assert info.value.retry_after_ms == pytest.approx(600)
    assert breaker.retry_after_ms == pytest.approx(600)


def test_a_stale_token_is_ignored() -> None:
    """A success recorded under a token from before the trip cannot close the breaker."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=10, clock=clock)
    old = breaker.admit()
    breaker.record(breaker.admit(), ConnectionError("down"))
    clock.increment(10)
    probe = breaker.admit()
    assert probe != old
    breaker.record(old)
    assert breaker.state == "half_open"
    breaker.record(probe)
    assert breaker.state == "closed"


def test_release_frees_the_probe_without_counting() -> None:
    """A released probe lets the next caller probe; nothing was counted."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=10, clock=clock)
    breaker.record(breaker.admit(), ConnectionError("down"))
    clock.increment(10)
    probe = breaker.admit()
    with pytest.raises(CircuitOpenError):
        breaker.admit()
    breaker.release(probe)
    assert breaker.admit() == probe
    assert breaker.opened_count == 1


def test_an_uncounted_error_is_not_a_failure() -> None:
    """An error outside ``exceptions`` recorded while closed leaves the count alone."""
    breaker = CircuitBreaker(failure_threshold=1, exceptions=ConnectionError)
    breaker.record(breaker.admit(), KeyError("bug"))
    assert (breaker.state, breaker.failures) == ("closed", 0)


def test_every_transition_is_a_fact() -> None:
    """Trip, cooldown and recovery emit ``BREAKER_TRANSITION`` with bounded fields."""
    seen = []
    stop = subscribe(seen.append)
    try:
        clock = SimulatedClock()
        breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=10, name="geo", clock=clock)
        breaker.record(breaker.admit(), ConnectionError("down"))
        clock.increment(10)
        breaker.record(breaker.admit())
    finally:
        stop()
    facts = [dict(f.fields) for f in seen if f.kind is FactKind.BREAKER_TRANSITION]
    scope = {"breaker": "geo", "scope": "process"}
    assert facts == [
        {**scope, "from_state": "closed", "to_state": "open", "reason": "failure"},
        {**scope, "from_state": "open", "to_state": "half_open", "reason": "cooldown"},
        {**scope, "from_state": "half_open", "to_state": "closed", "reason": "success"},
    ]
