"""The Redis limit backends keep the same contracts as the memory ones, on the shared Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import services
from tests.patterns.contract_limit_backends import (
    BreakerStateBackendContract,
    ConcurrencyBackendContract,
    RateLimitBackendContract,
)
from xsm_celery.checks import FLEET_LEASE_S
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.limit_backends import (
    RedisBreakerStateBackend,
    RedisConcurrencyBackend,
    RedisRateLimitBackend,
)


@pytest.fixture
def store() -> Iterator[FleetRedis]:
    """A FleetRedis under a prefix of this test; its keys are deleted afterwards."""
    services.require("redis")
    fleet = FleetRedis(services.REDIS_URL, prefix=f"xsm-test-backend-{uuid.uuid4().hex[:8]}:")
    yield fleet
    keys = list(fleet.client.scan_iter(match=f"{fleet.prefix}*", count=500))
    if keys:
        fleet.client.delete(*keys)


class TestRedisRateLimitBackend(RateLimitBackendContract):
    """``RedisRateLimitBackend`` keeps the rate limit contract."""

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisRateLimitBackend:
        """A backend on the test's prefix."""
        return RedisRateLimitBackend(store)


class TestRedisConcurrencyBackend(ConcurrencyBackendContract):
    """``RedisConcurrencyBackend`` keeps the leased slot contract."""

    short_lease_s = FLEET_LEASE_S.low

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisConcurrencyBackend:
        """A backend on the test's prefix."""
        return RedisConcurrencyBackend(store)


class TestRedisBreakerStateBackend(BreakerStateBackendContract):
    """``RedisBreakerStateBackend`` keeps ``CircuitBreaker``'s chart semantics."""

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisBreakerStateBackend:
        """A backend on the test's prefix."""
        return RedisBreakerStateBackend(store)
