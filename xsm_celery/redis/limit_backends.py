"""The Redis limit backends: the patterns' backend Protocols, kept for a whole fleet.

``RedisRateLimitBackend``, ``RedisConcurrencyBackend`` and ``RedisBreakerStateBackend``
implement ``RateLimitBackend``, ``ConcurrencyBackend`` and ``BreakerStateBackend`` of
``xsm_celery.patterns.limits.protocols``, so the in-process ``RateLimiter``, ``Bulkhead`` and
breaker registry can share their counters across processes. They are thin: every decision
is the same Lua script (or, for breakers, the same chart compare-and-set) that the Celery
fleet options use, read from Redis' clock in one round trip.

One backend object serves every key; specs and settings travel with each call. Keys are
opaque and live under the store's prefix.
"""

from __future__ import annotations

import math
import threading
import uuid
from typing import Any

from xsm_celery.checks import CONCURRENCY_LIMIT, FLEET_LEASE_S
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.limits.protocols import (
    Admission,
    BreakerDecision,
    BreakerSettings,
    BreakerStatus,
    RateSpec,
)
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis

__all__ = ["RedisBreakerStateBackend", "RedisConcurrencyBackend", "RedisRateLimitBackend"]


def _store(client: Any, prefix: str | None) -> FleetRedis:
    if isinstance(client, FleetRedis):
        return client
    return FleetRedis(client) if prefix is None else FleetRedis(client, prefix=prefix)


def _lease(lease_s: float) -> int:
    """The lease in milliseconds, checked like ``Concurrency(lease_s=)`` and ``RedisSlots``."""
    return int(FLEET_LEASE_S.check("lease_s", lease_s) * 1000)


class RedisRateLimitBackend:
    """Token buckets and sliding windows in Redis (``RateLimitBackend``).

    Args:
        client: A ``redis.Redis``, a ``redis://`` URL or a ``FleetRedis``.
        prefix: Key prefix (default: the fleet's, ``xsm:fleet:``).
    """

    def __init__(self, client: Any, *, prefix: str | None = None) -> None:
        self.store = _store(client, prefix)

    def acquire(self, key: str, cost: float, spec: RateSpec) -> Admission:
        """Take ``cost`` from ``key`` now, all or nothing (see the Protocol).

        Raises:
            ValueError: ``cost`` is not positive, not finite, or over ``spec.capacity``.
            StoreUnavailableError: Redis could not be reached.
        """
        if not (isinstance(cost, int | float) and math.isfinite(cost) and cost > 0):
            raise ConfigurationError(f"cost must be a finite number > 0, got {cost!r}")
        if cost > spec.capacity:
            raise ConfigurationError(
                f"cost {cost!r} is over the limit's capacity {spec.capacity!r}; it could never "
                "be admitted"
            )
        if spec.algorithm == "sliding_window":
            fleet_key = FleetKey("window", key)
            keys = (
                self.store.key(fleet_key),
                self.store.key(fleet_key, ":tail"),
                self.store.index_key(fleet_key),
            )
            member = uuid.uuid4().hex[:12]
            args = (int(spec.rate), int(spec.per_s * 1000), member, math.ceil(cost), "0")
            reply = self.store.run("SLIDING_WINDOW", keys, (*args, fleet_key.member))
            remaining = max(0.0, spec.rate - float(reply[2]))
        else:
            fleet_key = FleetKey("rate", key)
            reply = self.store.run(
                "TOKEN_BUCKET",
                (self.store.key(fleet_key), self.store.index_key(fleet_key)),
                (
                    repr(spec.tokens_per_s / 1000.0),
                    repr(spec.capacity),
                    repr(float(cost)),
                    0,
                    fleet_key.member,
                ),
            )
            if isinstance(reply, int):
                return Admission(allowed=True, retry_after_s=0.0, remaining=float(max(0, reply)))
            remaining = max(0.0, float(reply[2]))
        allowed = int(reply[0]) == 1
        wait = 0.0 if allowed else max(0.001, float(reply[1]) / 1000.0)
        return Admission(allowed=allowed, retry_after_s=wait, remaining=remaining)

    def reset(self, key: str) -> None:
        """Forget ``key`` (bucket and window alike), so it starts full."""
        self.store.forget(FleetKey("rate", key))
        self.store.forget(FleetKey("window", key), ":tail")


class RedisConcurrencyBackend:
    """Leased slots in Redis (``ConcurrencyBackend``)."""

    def __init__(self, client: Any, *, prefix: str | None = None) -> None:
        self.store = _store(client, prefix)

    def _keys(self, key: str) -> tuple[FleetKey, str, str]:
        fleet_key = FleetKey("slots", key)
        return fleet_key, self.store.key(fleet_key), self.store.key(fleet_key, ":meta")

    def acquire(self, key: str, holder: str, limit: int, lease_s: float) -> Admission:
        """Take one of ``limit`` slots for ``holder`` (see the Protocol).

        Raises:
            ValueError: ``limit`` or ``lease_s`` outside its range (``checks``): the
                lease must outlive the caller's renewals, from 2 s to an hour.
            StoreUnavailableError: Redis could not be reached.
        """
        limit = CONCURRENCY_LIMIT.check_int("limit", limit)
        lease_ms = _lease(lease_s)
        fleet_key, zset, meta = self._keys(key)
        reply = self.store.run(
            "CONCURRENCY_ACQUIRE",
            (zset, meta, self.store.index_key(fleet_key)),
            (holder, limit, lease_ms, limit, fleet_key.member),
        )
        allowed = int(reply[0]) == 1
        remaining = float(max(0, int(reply[3]) - int(reply[2])))
        wait = 0.0 if allowed else max(0.001, float(reply[1]) / 1000.0)
        return Admission(allowed=allowed, retry_after_s=wait, remaining=remaining)

    def renew(self, key: str, holder: str, lease_s: float) -> bool:
        """Extend ``holder``'s lease; False if the slot was already lost."""
        _, zset, _ = self._keys(key)
        lost = self.store.run("CONCURRENCY_RENEW", (zset,), (_lease(lease_s), holder))
        return not lost

    def release(self, key: str, holder: str) -> bool:
        """Give the slot back; True if ``holder`` held one."""
        _, zset, _ = self._keys(key)
        return bool(self.store.call(lambda: self.store.client.zrem(zset, holder)))

    def in_use(self, key: str) -> int:
        """Slots held now, expired leases dropped first."""
        _, zset, _ = self._keys(key)

        def count() -> int:
            now_s, now_us = self.store.client.time()
            now = now_s * 1000 + now_us // 1000
            self.store.client.zremrangebyscore(zset, "-inf", now)
            return int(self.store.client.zcard(zset))

        return self.store.call(count)


class RedisBreakerStateBackend:
    """Named breakers whose chart lives in Redis (``BreakerStateBackend``).

    Each call goes to Redis (the caller keeps the closed state cheap, as the Protocol
    says); the decisions are ``FleetBreaker``'s chart steps with compare-and-set.
    """

    def __init__(self, client: Any, *, prefix: str | None = None) -> None:
        self.store = _store(client, prefix)
        self._breakers: dict[tuple[str, BreakerSettings], FleetBreaker] = {}
        self._settings: dict[str, BreakerSettings] = {}
        self._lock = threading.Lock()

    def _breaker(self, name: str, settings: BreakerSettings | None) -> FleetBreaker:
        with self._lock:
            chosen = settings or self._settings.get(name) or BreakerSettings()
            self._settings[name] = chosen
            found = self._breakers.get((name, chosen))
            if found is None:
                found = self._breakers[(name, chosen)] = FleetBreaker(
                    self.store,
                    name,
                    check_interval_ms=0,
                    failure_threshold=chosen.failure_threshold,
                    cooldown_ms=chosen.cooldown_ms,
                    half_open_max_calls=chosen.half_open_max_calls,
                    success_threshold=chosen.success_threshold,
                    failure_rate_threshold=chosen.failure_rate_threshold,
                    window_size=chosen.window_size,
                )
            return found

    def admit(self, name: str, settings: BreakerSettings) -> BreakerDecision:
        """Admit one call, as a probe when half-open (see the Protocol)."""
        breaker = self._breaker(name, settings)
        admitted, status = breaker.admit_status()
        if admitted is None:
            return BreakerDecision(allowed=False, probe=False, status=_status(status))
        return BreakerDecision(allowed=True, probe=admitted.probe, status=_status(status))

    def record(
        self,
        name: str,
        settings: BreakerSettings,
        generation: int,
        *,
        failed: bool,
        probe: bool,
    ) -> BreakerStatus:
        """Count one outcome admitted under ``generation``; a stale one changes nothing."""
        event = "FAILURE" if failed else "SUCCESS"
        return _status(self._breaker(name, settings).apply(event, generation))

    def release(self, name: str, generation: int) -> None:
        """Free a probe slot whose call ended without a counted outcome."""
        self._breaker(name, None).apply("RELEASE", generation)

    def status(self, name: str, settings: BreakerSettings) -> BreakerStatus:
        """The breaker's status, an elapsed cooldown applied first."""
        return _status(self._breaker(name, settings).apply(None, None))

    def reset(self, name: str) -> BreakerStatus:
        """Close ``name`` now and bump its generation."""
        breaker = self._breaker(name, None)
        breaker.reset()
        return _status(breaker.apply(None, None))


def _status(state: dict[str, Any]) -> BreakerStatus:
    return BreakerStatus(
        state=state["state"],
        generation=int(state["token"]),
        failures=int(state["failures"]),
        opened_count=int(state["opened_count"]),
        retry_after_s=float(state.get("retry_after_ms", 0)) / 1000.0,
    )
