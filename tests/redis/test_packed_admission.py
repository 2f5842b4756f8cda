"""The pre-packed token-bucket admission: same answers as execute_command, restarts, outages."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests import services
from tests.kombu.private_redis import PrivateRedis, private_redis, running_redis  # noqa: F401
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.rate_limit import RedisTokenBucket


def _prefix() -> str:
    return f"xsm-test-packed-{uuid.uuid4().hex[:8]}:"


def test_the_packed_path_and_a_single_connection_client_share_one_bucket() -> None:
    """A pooled (packed) and a single-connection (execute_command) bucket spend one burst."""
    services.require("redis")
    prefix = _prefix()
    pooled = FleetRedis(services.REDIS_URL, prefix=prefix)
    single = FleetRedis(
        redis.Redis.from_url(services.REDIS_URL, single_connection_client=True), prefix=prefix
    )
    try:
        fast = RedisTokenBucket(pooled, "shared", rate=1, per=3600, burst=3)
        slow = RedisTokenBucket(single, "shared", rate=1, per=3600, burst=3)
        answers = [fast.try_acquire(), slow.try_acquire(), fast.try_acquire()]
        assert [a.admitted for a in answers] == [True, True, True]
        assert [a.level for a in answers] == [2, 1, 0]
        refused = slow.try_acquire()
        assert not refused.admitted
        assert 3_500_000 < refused.wait_ms <= 3_600_001  # one token an hour, ceil to the ms
        again = fast.try_acquire(reserve_max_ms=1)
        assert (again.admitted, again.reserved) == (False, False)
    finally:
        keys = list(pooled.client.scan_iter(match=f"{prefix}*", count=500))
        if keys:
            pooled.client.delete(*keys)


def test_a_flushed_script_and_a_restart_are_survived(
    running_redis: PrivateRedis,  # noqa: F811
) -> None:
    """After SCRIPT FLUSH and after a restart the packed admission reloads and keeps counting."""
    store = FleetRedis(running_redis.url(), prefix=_prefix())
    bucket = RedisTokenBucket(store, "flushed", rate=1, per=3600, burst=5)
    assert bucket.try_acquire().level == 4
    store.client.script_flush()
    assert bucket.try_acquire().level == 3
    running_redis.restart()
    assert bucket.try_acquire().level == 2


def test_an_outage_is_store_unavailable_for_the_packed_path(
    running_redis: PrivateRedis,  # noqa: F811
) -> None:
    """With Redis stopped, before and after the first packing, the bucket raises the outage."""
    store = FleetRedis(running_redis.url(), prefix=_prefix())
    warm = RedisTokenBucket(store, "warm", rate=10, burst=10)
    assert warm.try_acquire().admitted
    running_redis.stop()
    with pytest.raises(StoreUnavailableError, match="xsm_redis_url"):
        warm.try_acquire()
    cold = RedisTokenBucket(store, "cold", rate=10, burst=10)
    with pytest.raises(StoreUnavailableError, match="unreachable"):
        cold.try_acquire()
    running_redis.start()
    assert warm.try_acquire().admitted
