"""Every fleet script, the limit backends and the Redis inbox and idempotency store on a cluster.

The cluster is started by the tests (``bench.topologies``) on free loopback ports and
stopped afterwards. Many distinct names are used so that keys land on all three nodes; a
script whose keys hashed to different slots would be refused with ``CROSSSLOT``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from bench.topologies import RedisClusterNodes, start_cluster
from tests.patterns.contract_idempotency import IdempotencyStoreContract
from tests.patterns.contract_limit_backends import (
    BreakerStateBackendContract,
    ConcurrencyBackendContract,
    RateLimitBackendContract,
)
from tests.redis.topologies import or_skip
from xsm_celery.checks import FLEET_LEASE_S
from xsm_celery.errors import CircuitOpenError, StoreUnavailableError
from xsm_celery.redis import RedisIdempotencyStore, RedisInbox
from xsm_celery.redis.admission_records import AdmissionRecords
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import AimdParams, RedisSlots
from xsm_celery.redis.connection import redis_client
from xsm_celery.redis.fleet_ops import find_key, list_fleet, reset_fleet
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.limit_backends import (
    RedisBreakerStateBackend,
    RedisConcurrencyBackend,
    RedisRateLimitBackend,
)
from xsm_celery.redis.rate_limit import RedisSlidingWindow, RedisTokenBucket

pytestmark = pytest.mark.slow

#: Enough names that every node of the cluster holds some of them.
NAMES = [f"customer-{i}" for i in range(24)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterNodes]:
    """A three-primary Redis Cluster of this module's own."""
    nodes = or_skip(start_cluster)
    yield nodes
    nodes.stop()


@pytest.fixture
def client(cluster: RedisClusterNodes) -> Iterator[redis.Redis[bytes]]:
    """A cluster client opened the way the package opens one, from the cluster URL."""
    conn = redis_client(cluster.url, socket_timeout=2.0)
    as_cluster(conn)
    yield conn
    conn.close()


@pytest.fixture
def store(client: redis.Redis[bytes]) -> FleetRedis:
    """A FleetRedis on the cluster under a prefix of this test."""
    return FleetRedis(client, prefix=f"xsm-test-cluster-{uuid.uuid4().hex[:8]}:")


def as_cluster(client: object) -> RedisCluster[bytes]:
    """``client`` as the cluster client it is."""
    assert isinstance(client, RedisCluster)
    return client


def keys_per_node(client: redis.Redis[bytes], prefix: str) -> dict[str, int]:
    """How many keys under ``prefix`` each primary holds (a SCAN per primary)."""
    cluster_client = as_cluster(client)
    return {
        node.name: len(
            list(cluster_client.scan_iter(match=f"{prefix}*", count=1000, target_nodes=node))
        )
        for node in cluster_client.get_primaries()
    }


def assert_on_every_node(client: redis.Redis[bytes], prefix: str) -> None:
    """Every primary holds keys under ``prefix``."""
    counts = keys_per_node(client, prefix)
    assert len(counts) == 3
    assert all(counts.values()), counts


def test_token_buckets_admit_reserve_and_refuse_on_every_node(store: FleetRedis) -> None:
    """Each bucket admits its burst, reserves within the bound, then refuses, on any node."""
    for name in NAMES:
        bucket = RedisTokenBucket(store, name, 1, per=60, burst=2)
        assert [bucket.try_acquire().admitted for _ in range(2)] == [True, True]
        reserved = bucket.try_acquire(reserve_max_ms=120_000)
        assert reserved.reserved
        assert 0 < reserved.wait_ms <= 60_000
        refused = bucket.try_acquire()
        assert not refused.admitted
        assert not refused.reserved
    assert_on_every_node(store.client, store.prefix)


def test_sliding_windows_hold_their_limit_on_every_node(store: FleetRedis) -> None:
    """Each window admits ``limit`` calls, then spreads the refused ones."""
    for name in NAMES:
        window = RedisSlidingWindow(store, name, 2, window_s=60)
        assert [window.try_acquire().admitted for _ in range(2)] == [True, True]
        first, second = window.try_acquire(), window.try_acquire()
        assert not first.admitted
        assert second.wait_ms > first.wait_ms
    assert_on_every_node(store.client, store.prefix)


def test_slot_pools_lease_renew_and_release_on_every_node(store: FleetRedis) -> None:
    """Fixed pools lease, renew and release; AIMD pools move their limit on release."""
    params = AimdParams(initial=2, min_limit=1, max_limit=4, interval_s=1.0)
    for name in NAMES:
        pool = RedisSlots(store, name, 1, lease_s=5)
        decision, lease = pool.try_acquire()
        assert decision.admitted
        assert lease is not None
        assert not pool.try_acquire()[0].admitted
        assert pool.renew([lease.holder, "gone"]) == ["gone"]
        pool.release(lease.holder, 10, failed=False)
        assert pool.try_acquire()[0].admitted
        adaptive = RedisSlots(store, f"aimd-{name}", aimd=params)
        _, held = adaptive.try_acquire()
        assert held is not None
        assert adaptive.release(held.holder, 5, failed=True) == 1
        assert adaptive.state()["limit"] == 1
    assert_on_every_node(store.client, store.prefix)


def test_breakers_trip_and_close_on_every_node(store: FleetRedis) -> None:
    """Each breaker opens on its failure, refuses, and a probe after the cooldown closes it."""
    breakers = [
        FleetBreaker(store, name, check_interval_ms=0, failure_threshold=1, cooldown_ms=300)
        for name in NAMES
    ]
    for breaker in breakers:
        breaker.record(breaker.admit(), "failure")
        with pytest.raises(CircuitOpenError):
            breaker.admit()
    time.sleep(0.35)
    for breaker in breakers:
        probe = breaker.admit()
        assert probe.probe
        breaker.record(probe, "success")
        assert breaker.state()["state"] == "closed"
    assert_on_every_node(store.client, store.prefix)


def test_admission_records_reserve_take_and_count_deferrals(store: FleetRedis) -> None:
    """Reservations are taken once and deferral notes count up, for task ids on every node."""
    records = AdmissionRecords(store)
    for name in NAMES:
        task_id = f"task-{name}"
        records.reserve("limit", task_id, 1_000)
        assert records.take("limit", task_id)
        assert not records.take("limit", task_id)
        first, count, now = records.note_deferral(task_id, 60)
        assert count == 1
        assert first <= now
        assert records.note_deferral(task_id, 60)[1:2] == (2,)
    assert_on_every_node(store.client, store.prefix)
    for name in NAMES:
        records.forget_deferrals(f"task-{name}")
    assert sum(keys_per_node(store.client, store.prefix).values()) == 0


def test_the_index_lists_keys_of_every_node_and_a_reset_clears_one(store: FleetRedis) -> None:
    """list_fleet sees the keys of all nodes; find_key and reset_fleet act on one of them."""
    for name in NAMES:
        RedisTokenBucket(store, name, 1, per=60, burst=1).try_acquire()
        RedisSlidingWindow(store, name, 1, window_s=60).try_acquire()
    rows = list_fleet(store)
    assert {(r.kind, r.name) for r in rows} == {
        (kind, name) for kind in ("rate", "window") for name in NAMES
    }
    key = find_key(store, f"window:{NAMES[5]}")
    assert reset_fleet(store, key) == "cleared"
    assert ("window", NAMES[5]) not in {(k.kind, k.name) for k, _ in store.indexed()}
    assert RedisSlidingWindow(store, NAMES[5], 1, window_s=60).try_acquire().admitted


def test_scripts_flushed_from_every_node_are_loaded_again(store: FleetRedis) -> None:
    """A cluster-wide SCRIPT FLUSH (a restarted node) costs a reload, not an error."""
    buckets = [RedisTokenBucket(store, name, 10, burst=10) for name in NAMES]
    assert all(b.try_acquire().admitted for b in buckets)
    assert store.client.script_flush()  # sent to every primary
    assert all(b.try_acquire().admitted for b in buckets)


def test_the_inbox_claims_marks_releases_and_forgets_on_every_node(
    client: redis.Redis[bytes],
) -> None:
    """Inbox scopes on every node: one claim wins, receipts stay, forget drops a scope."""
    prefix = f"xsm-test-cluster-inbox-{uuid.uuid4().hex[:8]}:"
    inbox = RedisInbox(client, prefix=prefix)
    for scope in NAMES:
        assert inbox.claim(scope, "id-1", "fp", ttl_s=60)
        assert not inbox.claim(scope, "id-1", "other", ttl_s=60)
        inbox.mark(scope, "id-1", "done", ttl_s=None)
        inbox.claim(scope, "id-2", "fp", ttl_s=None)
        inbox.release(scope, "id-2")
        assert inbox.claim(scope, "id-2", "fp", ttl_s=None)
        entry = inbox.get(scope, "id-1")
        assert entry is not None
        assert (entry.fingerprint, entry.receipt) == ("fp", "done")
    assert_on_every_node(client, prefix)
    assert all(inbox.forget(scope) == 2 for scope in NAMES)
    assert sum(keys_per_node(client, prefix).values()) == 0


def test_a_lost_primary_fails_its_limits_fast_and_spares_the_others() -> None:
    """With one of three primaries killed, its limits fail within a second; the rest admit."""
    nodes = or_skip(start_cluster)
    try:
        store = FleetRedis(nodes.url, prefix="xsm-test-cluster-lost:")
        buckets = [RedisTokenBucket(store, name, 10, burst=10) for name in NAMES]
        assert all(b.try_acquire().admitted for b in buckets)
        nodes.processes[0].kill()
        nodes.processes[0].wait(timeout=10)
        outcomes = []
        for bucket in buckets:
            started = time.monotonic()
            try:
                outcomes.append(bucket.try_acquire().admitted)
            except StoreUnavailableError:
                outcomes.append(False)
                assert time.monotonic() - started < 1.0
        assert any(outcomes)
        assert not all(outcomes)
    finally:
        nodes.stop()


class TestClusterRateLimitBackend(RateLimitBackendContract):
    """``RedisRateLimitBackend`` keeps the rate limit contract on a cluster."""

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisRateLimitBackend:
        """A backend on the test's prefix."""
        return RedisRateLimitBackend(store)


class TestClusterConcurrencyBackend(ConcurrencyBackendContract):
    """``RedisConcurrencyBackend`` keeps the leased slot contract on a cluster."""

    short_lease_s = FLEET_LEASE_S.low

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisConcurrencyBackend:
        """A backend on the test's prefix."""
        return RedisConcurrencyBackend(store)


class TestClusterBreakerStateBackend(BreakerStateBackendContract):
    """``RedisBreakerStateBackend`` keeps ``CircuitBreaker``'s chart semantics on a cluster."""

    @pytest.fixture
    def backend(self, store: FleetRedis) -> RedisBreakerStateBackend:
        """A backend on the test's prefix."""
        return RedisBreakerStateBackend(store)


class TestClusterIdempotencyStore(IdempotencyStoreContract):
    """``RedisIdempotencyStore`` keeps the idempotency store contract on a cluster."""

    @pytest.fixture
    def store(self, client: redis.Redis[bytes]) -> RedisIdempotencyStore:
        """A store under a prefix of this test."""
        return RedisIdempotencyStore(
            client, prefix=f"xsm-test-cluster-idem-{uuid.uuid4().hex[:8]}:"
        )
