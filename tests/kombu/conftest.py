"""Fixtures of the kombu adapter tests: the shared Redis database and a private Redis."""

from __future__ import annotations

import pytest

from tests.kombu.private_redis import private_redis, running_redis

__all__ = ["private_redis", "redis_db_url", "running_redis"]

#: The Redis database these tests use on the shared server, apart from other areas' tests.
REDIS_DB = 5


@pytest.fixture
def redis_db_url(redis_url: str) -> str:
    """The shared Redis, database 5 (kept apart from other areas' tests)."""
    return redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
