"""The circuit breaker: its chart, the in-process ``CircuitBreaker``, shared state, presets.

``chart`` is the breaker as a statechart; ``circuit`` runs that chart behind one lock
(``CircuitBreaker``, ``@circuit_breaker``); ``backend`` keeps named breakers behind the
``BreakerStateBackend`` Protocol the fleet's Redis backend shares; ``registry`` builds
breakers from settings and presets.
"""

from __future__ import annotations

from xsm_celery.patterns.breaker.backend import MemoryBreakerStateBackend, breaker_from_settings
from xsm_celery.patterns.breaker.chart import CIRCUIT_BREAKER_CONFIG, circuit_breaker_logic
from xsm_celery.patterns.breaker.circuit import CircuitBreaker, CircuitState, circuit_breaker
from xsm_celery.patterns.breaker.registry import (
    PRESETS,
    BreakerConfig,
    CircuitBreakerRegistry,
    parse_breaker_settings,
)

__all__ = [
    "CIRCUIT_BREAKER_CONFIG",
    "PRESETS",
    "BreakerConfig",
    "CircuitBreaker",
    "CircuitBreakerRegistry",
    "CircuitState",
    "MemoryBreakerStateBackend",
    "breaker_from_settings",
    "circuit_breaker",
    "circuit_breaker_logic",
    "parse_breaker_settings",
]
