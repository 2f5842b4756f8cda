"""RedisInbox on a real Redis: claims, receipts, TTLs, scopes, races, and an outage."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from tests.eda.outbox_contract import FakeClock
from tests.kombu.machines import STEP_TYPE, recorder, seen
from tests.kombu.private_redis import PrivateRedis, private_redis, running_redis  # noqa: F401
from xsm_celery.eda import Envelope, InboundDispatcher, SyncFakeBrokerAdapter, new_id
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence import MemoryStore
from xsm_celery.persistence.protocols import Inbox
from xsm_celery.redis import RedisInbox

pytestmark = pytest.mark.service


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis[bytes]]:
    """A client on database 5 of the shared Redis."""
    conn: redis.Redis[bytes] = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/5")
    yield conn
    conn.close()


@pytest.fixture
def prefix(client: redis.Redis[bytes]) -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    value = f"xsm-test:{new_id()}:"
    yield value
    keys = list(client.scan_iter(match=f"{value}*"))
    if keys:
        client.delete(*keys)


def test_redis_inbox_satisfies_the_protocol(client: redis.Redis[bytes], prefix: str) -> None:
    """RedisInbox is an Inbox as persistence.protocols defines it."""
    assert isinstance(RedisInbox(client, prefix=prefix), Inbox)


def test_first_claim_wins_and_the_receipt_answers(client: redis.Redis[bytes], prefix: str) -> None:
    """One claim wins; mark() stores the receipt next to the first fingerprint."""
    inbox = RedisInbox(client, prefix=prefix)
    assert inbox.get("src", "id-1") is None
    assert inbox.claim("src", "id-1", "fp", ttl_s=None)
    assert not inbox.claim("src", "id-1", "other", ttl_s=None)
    entry = inbox.get("src", "id-1")
    assert entry is not None
    assert (entry.fingerprint, entry.receipt, entry.expires_at) == ("fp", None, None)
    inbox.mark("src", "id-1", '{"ok": true}', ttl_s=None)
    entry = inbox.get("src", "id-1")
    assert entry is not None
    assert (entry.fingerprint, entry.receipt) == ("fp", '{"ok": true}')


def test_release_keeps_receipts(client: redis.Redis[bytes], prefix: str) -> None:
    """release() frees an unfinished claim but never a completed entry."""
    inbox = RedisInbox(client, prefix=prefix)
    inbox.claim("s", "k", "fp", ttl_s=None)
    inbox.release("s", "k")
    assert inbox.claim("s", "k", "fp", ttl_s=None)
    inbox.mark("s", "k", "r", ttl_s=None)
    inbox.release("s", "k")
    assert not inbox.claim("s", "k", "fp", ttl_s=None)


def test_ttl_expires_entries_in_redis(client: redis.Redis[bytes], prefix: str) -> None:
    """An entry with a TTL carries its expiry and Redis drops it when the TTL runs out."""
    clock = FakeClock(start=time.time())
    inbox = RedisInbox(client, prefix=prefix, clock=clock)
    inbox.claim("s", "k", "fp", ttl_s=0.2)
    entry = inbox.get("s", "k")
    assert entry is not None
    assert entry.expires_at == pytest.approx(clock.now + 0.2)
    time.sleep(0.35)
    assert inbox.get("s", "k") is None
    assert inbox.claim("s", "k", "fp", ttl_s=None)
    assert inbox.purge_expired() == 0


def test_mark_with_ttl_none_makes_the_entry_permanent(
    client: redis.Redis[bytes], prefix: str
) -> None:
    """A claim with a TTL marked without one keeps the receipt for good."""
    inbox = RedisInbox(client, prefix=prefix)
    inbox.claim("s", "k", "fp", ttl_s=5)
    inbox.mark("s", "k", "r", ttl_s=None)
    assert client.ttl(f"{prefix}{{scope:s}}\x00k") == -1


def test_forget_drops_one_scope(client: redis.Redis[bytes], prefix: str) -> None:
    """forget(scope) deletes that scope's entries and no other's."""
    inbox = RedisInbox(client, prefix=prefix)
    for key in ("a", "b"):
        inbox.claim("one", key, "fp", ttl_s=None)
    inbox.mark("two", "a", "r", ttl_s=None)
    assert inbox.forget("one") == 2
    assert inbox.get("one", "a") is None
    assert inbox.get("two", "a") is not None


def test_concurrent_claims_have_one_winner(client: redis.Redis[bytes], prefix: str) -> None:
    """Eight consumers claiming one id at once: exactly one wins."""
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        mine = RedisInbox(redis.Redis(connection_pool=client.connection_pool), prefix=prefix)
        barrier.wait(10)
        results.append(mine.claim("s", "same", "fp", ttl_s=None))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(results) == [False] * 7 + [True]


def test_two_dispatchers_share_the_redis_inbox(client: redis.Redis[bytes], prefix: str) -> None:
    """A redelivery reaching another consumer process is answered as a duplicate."""
    store = MemoryStore()
    first = InboundDispatcher(
        store, {STEP_TYPE: recorder()}, inbox=RedisInbox(client, prefix=prefix)
    )
    second = InboundDispatcher(
        store, {STEP_TYPE: recorder()}, inbox=RedisInbox(client, prefix=prefix)
    )
    env = Envelope.new(type=STEP_TYPE, subject="acct-1", data={"n": 1})
    bus = SyncFakeBrokerAdapter()
    bus.deliver("in", env)
    assert first.run_once_sync(bus, "in").processed == 1
    bus.deliver("in", env)
    assert second.run_once_sync(bus, "in").duplicates == 1
    assert seen(store, "acct-1") == [1]


def test_redis_down_is_a_store_outage_requeued_uncounted(running_redis: PrivateRedis) -> None:  # noqa: F811
    """With the inbox's Redis down, deliveries are requeued, not counted as poison."""
    inbox = RedisInbox(running_redis.url(5), prefix="xsm-test:")
    dispatcher = InboundDispatcher(
        MemoryStore(), {STEP_TYPE: recorder()}, inbox=inbox, max_attempts=2
    )
    bus = SyncFakeBrokerAdapter()
    bus.deliver("in", Envelope.new(type=STEP_TYPE, subject="acct-1", data={"n": 1}))
    running_redis.stop()
    with pytest.raises(StoreUnavailableError):
        inbox.get("s", "k")
    for _ in range(3):
        result = dispatcher.run_once_sync(bus, "in")
        assert (result.retried, result.dead_lettered) == (1, 0)
    running_redis.start()
    assert dispatcher.run_once_sync(bus, "in").processed == 1
