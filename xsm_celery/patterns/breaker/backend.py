"""``MemoryBreakerStateBackend``: the ``BreakerStateBackend`` Protocol on in-process breakers.

Each name gets a ``CircuitBreaker`` built from the first ``BreakerSettings`` it is used
with, so the memory backend has exactly the chart semantics (probes, success threshold,
failure rate, window tokens) that a fleet backend must reproduce; the contract suite runs
against it first. The breaker's window token is the backend's generation.
"""

from __future__ import annotations

import threading

from xsm_celery.engine import Clock
from xsm_celery.errors import CircuitOpenError
from xsm_celery.patterns.breaker.circuit import CircuitBreaker
from xsm_celery.patterns.limits.protocols import (
    BreakerDecision,
    BreakerSettings,
    BreakerStatus,
)

__all__ = ["MemoryBreakerStateBackend", "breaker_from_settings"]


class _CountedFailure(Exception):
    """The failure a backend reports for an outcome whose exception it never saw."""


def breaker_from_settings(
    name: str, settings: BreakerSettings, *, clock: Clock | None = None
) -> CircuitBreaker:
    """A ``CircuitBreaker`` named ``name`` with the thresholds of ``settings``."""
    return CircuitBreaker(
        failure_threshold=settings.failure_threshold,
        cooldown_ms=settings.cooldown_ms,
        half_open_max_calls=settings.half_open_max_calls,
        success_threshold=settings.success_threshold,
        failure_rate_threshold=settings.failure_rate_threshold,
        window_size=settings.window_size,
        name=name,
        clock=clock,
    )


class MemoryBreakerStateBackend:
    """Named breakers of one process, behind the ``BreakerStateBackend`` Protocol.

    Args:
        clock: The engine clock every breaker uses; a ``SimulatedClock`` in tests.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}

    def admit(self, name: str, settings: BreakerSettings) -> BreakerDecision:
        """Admit one call of ``name`` now, as a probe when half-open."""
        breaker = self._get(name, settings)
        try:
            token = breaker.admit()
        except CircuitOpenError:
            return BreakerDecision(False, False, _status(breaker))
        status = _status(breaker, generation=token)
        return BreakerDecision(True, status.state == "half_open", status)

    def record(
        self,
        name: str,
        settings: BreakerSettings,
        generation: int,
        *,
        failed: bool,
        probe: bool,
    ) -> BreakerStatus:
        """Count one outcome admitted under ``generation``; stale ones change nothing."""
        breaker = self._get(name, settings)
        breaker.record(generation, _CountedFailure(name) if failed else None)
        return _status(breaker)

    def release(self, name: str, generation: int) -> None:
        """Free a probe slot without counting an outcome."""
        with self._lock:
            breaker = self._breakers.get(name)
        if breaker is not None:
            breaker.release(generation)

    def status(self, name: str, settings: BreakerSettings) -> BreakerStatus:
        """The current status of ``name``, an elapsed cooldown applied first."""
        return _status(self._get(name, settings))

    def reset(self, name: str) -> BreakerStatus:
        """Close ``name`` now; an unknown name is created closed with default settings."""
        breaker = self._get(name, BreakerSettings())
        breaker.reset()
        return _status(breaker)

    def _get(self, name: str, settings: BreakerSettings) -> CircuitBreaker:
        with self._lock:
            breaker = self._breakers.get(name)
            if breaker is None:
                breaker = breaker_from_settings(name, settings, clock=self._clock)
                self._breakers[name] = breaker
            return breaker


def _status(breaker: CircuitBreaker, generation: int | None = None) -> BreakerStatus:
    """The breaker's status; ``generation`` is the admission's token when there was one."""
    state = breaker.state
    retry_after_ms = breaker.retry_after_ms
    return BreakerStatus(
        state=state,
        generation=breaker.generation if generation is None else generation,
        failures=breaker.failures,
        opened_count=breaker.opened_count,
        retry_after_s=0.0 if retry_after_ms is None else retry_after_ms / 1000.0,
    )
