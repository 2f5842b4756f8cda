"""``CircuitBreakerRegistry``: one breaker per name, built from configuration, resettable."""

from __future__ import annotations

import threading

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import BreakerSettings, CircuitBreakerRegistry


def fail() -> None:
    """A call that always fails."""
    raise ConnectionError("down")


def trip(registry: CircuitBreakerRegistry, name: str, times: int) -> None:
    """Fail ``times`` calls through the breaker ``name``."""
    for _ in range(times):
        with pytest.raises(ConnectionError):
            registry.get(name).call(fail)


def test_one_name_is_one_breaker_across_threads() -> None:
    """Threads asking for the same name at once all get the same object."""
    registry = CircuitBreakerRegistry()
    barrier = threading.Barrier(8)
    found = []

    def ask() -> None:
        barrier.wait(timeout=5)
        found.append(registry.get("payments"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert len({id(b) for b in found}) == 1
    assert found[0].name == "payments"


def test_breakers_are_built_from_their_configuration() -> None:
    """A mapping, a preset name and BreakerSettings all configure a breaker."""
    clock = SimulatedClock()
    registry = CircuitBreakerRegistry(
        {
            "payments": {"failure_threshold": 2, "cooldown_ms": 1_000},
            "geo": "sensitive",
            "mail": BreakerSettings(failure_threshold=4),
        },
        clock=clock,
    )
    trip(registry, "payments", 2)
    trip(registry, "geo", 3)
    trip(registry, "mail", 3)
    assert registry.states() == {"geo": "open", "mail": "closed", "payments": "open"}
    clock.increment(1_000)
    assert registry.get("payments").state == "half_open"
    assert registry.get("geo").cooldown_ms == 30_000


def test_unknown_names_use_the_default_unless_strict() -> None:
    """A name not configured gets ``default``; with ``strict`` it is refused by name."""
    assert CircuitBreakerRegistry(default="tolerant").settings("x").failure_threshold == 10
    with pytest.raises(ConfigurationError, match="known: payments"):
        CircuitBreakerRegistry({"payments": {}}, strict=True).get("paymnets")


def test_reset_closes_a_named_breaker_or_all() -> None:
    """``reset`` closes one breaker, ``reset_all`` every one; unknown names are a KeyError."""
    registry = CircuitBreakerRegistry(default={"failure_threshold": 1}, clock=SimulatedClock())
    trip(registry, "a", 1)
    trip(registry, "b", 1)
    registry.reset("a")
    assert registry.states() == {"a": "closed", "b": "open"}
    registry.reset_all()
    assert set(registry.states().values()) == {"closed"}
    with pytest.raises(KeyError, match="never"):
        registry.reset("never")
    assert (list(registry), len(registry), "a" in registry) == (["a", "b"], 2, True)


def test_reconfiguring_rebuilds_the_breaker() -> None:
    """``configure`` replaces the settings; the next ``get`` builds a fresh breaker."""
    registry = CircuitBreakerRegistry(clock=SimulatedClock())
    first = registry.get("a")
    registry.configure("a", {"failure_threshold": 1})
    second = registry.get("a")
    assert second is not first
    trip(registry, "a", 1)
    assert second.state == "open"


@pytest.mark.parametrize(
    ("config", "word"),
    [
        ({"failure_treshold": 3}, "unknown setting"),
        ("jumpy", "unknown preset"),
        ({"failure_threshold": 0}, "failure_threshold"),
        (5, "must be a mapping"),
    ],
)
def test_bad_configuration_is_refused_up_front(config: object, word: str) -> None:
    """A typo, an unknown preset or a bad number fails when the registry is built."""
    with pytest.raises(ConfigurationError, match=word) as info:
        CircuitBreakerRegistry({"payments": config})  # type: ignore[dict-item]
    assert "'payments'" in str(info.value)
