"""The presets the specification names: sensitive/tolerant breakers, aggressive/conservative retry."""

from __future__ import annotations

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import CircuitOpenError
from xsm_celery.patterns import CircuitBreaker, RetryPolicy


def boom() -> None:
    """A call that always fails."""
    raise ConnectionError("down")


@pytest.mark.parametrize(
    ("preset", "failures", "cooldown_ms"),
    [(CircuitBreaker.sensitive, 3, 30_000), (CircuitBreaker.tolerant, 10, 120_000)],
)
def test_breaker_presets_trip_and_recover_as_stated(
    preset: object, failures: int, cooldown_ms: float
) -> None:
    """The breaker opens on exactly its failure count and half-opens after its recovery time."""
    clock = SimulatedClock()
    breaker = preset(clock=clock)  # type: ignore[operator]
    for _ in range(failures - 1):
        with pytest.raises(ConnectionError):
            breaker.call(boom)
    assert breaker.state == "closed"
    with pytest.raises(ConnectionError):
        breaker.call(boom)
    assert breaker.state == "open"
    clock.increment(cooldown_ms - 1)
    with pytest.raises(CircuitOpenError):
        breaker.call(boom)
    clock.increment(1)
    assert breaker.state == "half_open"


def test_breaker_presets_take_overrides() -> None:
    """Keyword arguments override a preset's numbers and add a name."""
    breaker = CircuitBreaker.sensitive(cooldown_ms=5, name="geo")
    assert (breaker.name, breaker.cooldown_ms) == ("geo", 5)


@pytest.mark.parametrize(
    ("preset", "attempts", "delays"),
    [
        (RetryPolicy.aggressive, 5, [100, 150, 225, 337.5]),
        (RetryPolicy.conservative, 3, [2_000, 4_000]),
    ],
)
def test_retry_presets_back_off_as_stated(
    preset: object, attempts: int, delays: list[float]
) -> None:
    """Aggressive: 5 attempts from 100 ms x1.5; conservative: 3 from 2 s x2 (before jitter)."""
    policy = preset(jitter="none")  # type: ignore[operator]
    assert policy.max_attempts == attempts
    assert [policy.delay_ms(n) for n in range(1, attempts)] == delays
