"""RedisIdempotencyStore on the real Redis: the contract, and an outage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.kombu.private_redis import PrivateRedis, private_redis, running_redis  # noqa: F401
from tests.patterns.contract_idempotency import IdempotencyStoreContract
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.ids import new_id
from xsm_celery.patterns import idempotent
from xsm_celery.redis import RedisIdempotencyStore

pytestmark = pytest.mark.service


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis[bytes]]:
    """A client on the shared Redis."""
    conn: redis.Redis[bytes] = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


class TestRedisIdempotencyStore(IdempotencyStoreContract):
    """``RedisIdempotencyStore`` keeps the idempotency store contract on real Redis."""

    @pytest.fixture
    def store(self, client: redis.Redis[bytes]) -> Iterator[RedisIdempotencyStore]:
        """A store under a prefix no other test uses; its keys are deleted afterwards."""
        prefix = f"xsm-test:idem:{new_id()}:"
        yield RedisIdempotencyStore(client, prefix=prefix)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)


def test_keys_carry_a_redis_ttl(client: redis.Redis[bytes]) -> None:
    """A claim and a result both expire in Redis itself; a result kept for ever has none."""
    prefix = f"xsm-test:idem:{new_id()}:"
    store = RedisIdempotencyStore(client, prefix=prefix)
    store.claim("k", "a", 30)
    assert 0 < client.pttl(prefix + "k") <= 30_000
    store.complete("k", "a", "r", None)
    assert client.pttl(prefix + "k") == -1
    client.delete(prefix + "k")


def test_an_outage_is_store_unavailable(running_redis: PrivateRedis) -> None:  # noqa: F811
    """With Redis stopped, a claim raises ``StoreUnavailableError`` and the body never runs."""
    store = RedisIdempotencyStore(running_redis.url(), prefix=f"xsm-test:idem:{new_id()}:")
    calls = []

    @idempotent(store)
    def work() -> int:
        calls.append(1)
        return 1

    assert work() == 1
    running_redis.stop()
    with pytest.raises(StoreUnavailableError, match="retry the call"):
        work()
    assert calls == [1]
