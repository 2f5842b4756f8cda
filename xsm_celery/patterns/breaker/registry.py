"""``CircuitBreakerRegistry``: named breakers, built on first use from one configuration.

One dependency should have one breaker however many call sites reach it, or each site
trips on its own and the dependency keeps being hammered. The registry hands out the
breaker of a name, creating it from the configured settings the first time, so
``registry.get("payments")`` in a task and in a view is the same object. The
configuration has the shape of the ``xsm_breakers`` setting::

    registry = CircuitBreakerRegistry({
        "payments": {"failure_threshold": 5, "cooldown_ms": 30_000},
        "geo": "sensitive",
    })
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any

from xsm_celery.engine import Clock
from xsm_celery.errors import ConfigurationError, UnknownNameError
from xsm_celery.patterns.breaker.backend import breaker_from_settings
from xsm_celery.patterns.breaker.circuit import CircuitBreaker, CircuitState
from xsm_celery.patterns.limits.protocols import BreakerSettings

__all__ = ["BreakerConfig", "CircuitBreakerRegistry", "PRESETS", "parse_breaker_settings"]

#: A breaker's configuration: settings, a mapping of their fields, or a preset name.
BreakerConfig = BreakerSettings | Mapping[str, Any] | str

#: The preset names a configuration may use instead of numbers.
PRESETS: dict[str, BreakerSettings] = {
    "default": BreakerSettings(),
    "sensitive": BreakerSettings(failure_threshold=3, cooldown_ms=30_000),
    "tolerant": BreakerSettings(failure_threshold=10, cooldown_ms=120_000),
}

_FIELDS = tuple(f.name for f in fields(BreakerSettings))


def parse_breaker_settings(name: str, config: BreakerConfig) -> BreakerSettings:
    """``config`` as ``BreakerSettings``; the error names the breaker and the bad key.

    Raises:
        ConfigurationError: An unknown preset or key, or a value out of range.
    """
    if isinstance(config, BreakerSettings):
        return config
    if isinstance(config, str):
        if config not in PRESETS:
            raise ConfigurationError(
                f"breaker {name!r}: unknown preset {config!r}; use one of {sorted(PRESETS)} "
                "or a mapping of settings"
            )
        return PRESETS[config]
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"breaker {name!r}: configuration must be a mapping, a preset name or "
            f"BreakerSettings, got {type(config).__name__}"
        )
    unknown = sorted(set(config) - set(_FIELDS))
    if unknown:
        raise ConfigurationError(
            f"breaker {name!r}: unknown setting(s) {unknown}; valid ones are {list(_FIELDS)}"
        )
    try:
        return BreakerSettings(**config)
    except ValueError as exc:
        raise ConfigurationError(f"breaker {name!r}: {exc}") from exc


class CircuitBreakerRegistry:
    """Named ``CircuitBreaker`` objects, created on first use from configured settings.

    Args:
        configs: ``{name: settings}``; settings are ``BreakerSettings``, a mapping of
            their fields (``failure_threshold``, ``cooldown_ms``, ...) or a preset name.
        default: Settings for names not in ``configs`` (default: ``BreakerSettings()``).
        strict: Refuse names not in ``configs`` instead of using ``default``, so a typo
            in a breaker name fails loudly.
        clock: The engine clock every breaker uses; a ``SimulatedClock`` in tests.

    Raises:
        ConfigurationError: A configuration is invalid; checked here, not on first use.
    """

    def __init__(
        self,
        configs: Mapping[str, BreakerConfig] | None = None,
        *,
        default: BreakerConfig = "default",
        strict: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self._settings = {
            name: parse_breaker_settings(name, config) for name, config in (configs or {}).items()
        }
        self.default = parse_breaker_settings("default", default)
        self.strict = strict
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, name: str) -> CircuitBreaker:
        """The breaker named ``name``, created from its settings the first time.

        Raises:
            ConfigurationError: ``strict`` is on and ``name`` is not configured.
        """
        breaker = self._breakers.get(name)
        if breaker is not None:
            return breaker
        with self._lock:
            breaker = self._breakers.get(name)
            if breaker is None:
                breaker = breaker_from_settings(name, self.settings(name), clock=self._clock)
                self._breakers[name] = breaker
            return breaker

    def settings(self, name: str) -> BreakerSettings:
        """The settings ``name`` is (or would be) built with."""
        if name in self._settings:
            return self._settings[name]
        if self.strict:
            known = ", ".join(sorted(self._settings)) or "none"
            raise ConfigurationError(
                f"no breaker named {name!r} is configured (known: {known}); add it to the "
                "configuration or build the registry with strict=False"
            )
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a breaker name must be a non-empty string, got {name!r}")
        return self.default

    def configure(self, name: str, config: BreakerConfig) -> None:
        """Set ``name``'s settings; a breaker already built is rebuilt, closed, on next use."""
        settings = parse_breaker_settings(name, config)
        with self._lock:
            self._settings[name] = settings
            old = self._breakers.pop(name, None)
        if old is not None:
            old.close()

    def reset(self, name: str) -> None:
        """Close the breaker ``name`` now (operator override); unknown names are a KeyError."""
        with self._lock:
            breaker = self._breakers.get(name)
        if breaker is None:
            raise UnknownNameError(f"no breaker named {name!r} has been used yet")
        breaker.reset()

    def reset_all(self) -> None:
        """Close every breaker built so far."""
        with self._lock:
            breakers = list(self._breakers.values())
        for breaker in breakers:
            breaker.reset()

    def states(self) -> dict[str, CircuitState]:
        """``{name: state}`` of every breaker built so far, cooldowns applied."""
        with self._lock:
            breakers = dict(self._breakers)
        return {name: breaker.state for name, breaker in sorted(breakers.items())}

    def __contains__(self, name: object) -> bool:
        return name in self._breakers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._breakers))

    def __len__(self) -> int:
        return len(self._breakers)
