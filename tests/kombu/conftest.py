"""Fixtures of the kombu adapter tests: adapters on the shared services and a private Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kombu.private_redis import PrivateRedis

#: The Redis database these tests use on the shared server, apart from other areas' tests.
REDIS_DB = 5


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server of this session's own, which tests may kill and restart."""
    server = PrivateRedis()
    server.start()
    yield server
    server.close()


@pytest.fixture
def running_redis(private_redis: PrivateRedis) -> PrivateRedis:
    """The private Redis, started again if an earlier test left it stopped."""
    private_redis.start()
    return private_redis


@pytest.fixture
def redis_db_url(redis_url: str) -> str:
    """The shared Redis, database 5 (kept apart from other areas' tests)."""
    return redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
