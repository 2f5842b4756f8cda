"""CIRCUIT_BREAKER_CONFIG and circuit_breaker_logic work on their own, embedded in any machine."""

from __future__ import annotations

import math

import pytest

from xsm_celery.engine import SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.patterns import CIRCUIT_BREAKER_CONFIG, circuit_breaker_logic


def run() -> tuple[SyncInterpreter, SimulatedClock]:
    clock = SimulatedClock()
    machine = create_machine(CIRCUIT_BREAKER_CONFIG, logic=circuit_breaker_logic(1_000))
    return SyncInterpreter(machine, clock=clock).start(), clock


def test_chart_shape() -> None:
    """Three atomic states, the open one tagged rejecting with an after on the named cooldown."""
    assert CIRCUIT_BREAKER_CONFIG["id"] == "circuitBreaker"
    assert set(CIRCUIT_BREAKER_CONFIG["states"]) == {"closed", "open", "half_open"}
    assert CIRCUIT_BREAKER_CONFIG["states"]["open"]["tags"] == ["rejecting"]
    assert "cooldown" in CIRCUIT_BREAKER_CONFIG["states"]["open"]["after"]


def test_chart_runs_the_full_cycle_without_the_breaker_class() -> None:
    """FAILUREs trip it, the cooldown half-opens it, PROBE then SUCCESS closes it."""
    interp, clock = run()
    for _ in range(5):
        interp.send("FAILURE")
    assert interp.matches("circuitBreaker.open")
    assert interp.has_tag("rejecting")
    clock.increment(1_001)
    assert interp.matches("circuitBreaker.half_open")
    interp.send("PROBE")
    assert interp.context["probes_in_flight"] == 1
    interp.send("PROBE")
    assert interp.context["probes_in_flight"] == 1  # the only slot is taken
    interp.send("SUCCESS")
    assert interp.matches("circuitBreaker.closed")
    assert interp.context["opened_count"] == 1


def test_reset_event_closes_from_open() -> None:
    """RESET is the operator override back to closed."""
    interp, _ = run()
    for _ in range(5):
        interp.send("FAILURE")
    interp.send("RESET")
    assert interp.matches("circuitBreaker.closed")
    assert interp.context["failures"] == 0


def test_module_config_is_not_mutated_by_breakers() -> None:
    """Building breakers never changes the shared config dict."""
    from xsm_celery.patterns import CircuitBreaker

    before = repr(CIRCUIT_BREAKER_CONFIG)
    CircuitBreaker(failure_threshold=2, name="x", failure_rate_threshold=0.5).close()
    assert repr(CIRCUIT_BREAKER_CONFIG) == before


@pytest.mark.parametrize("cooldown", [math.nan, math.inf, -1])
def test_logic_refuses_bad_cooldowns(cooldown: float) -> None:
    """circuit_breaker_logic checks the cooldown like the breaker does."""
    with pytest.raises(ValueError, match="cooldown_ms"):
        circuit_breaker_logic(cooldown)
