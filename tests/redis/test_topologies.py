"""The fleet limits, attempt markers and the inbox over Sentinel and TLS, with a failover.

Every topology is started by the tests on loopback ports (``bench.topologies``).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from celery import Celery
from celery.exceptions import Ignore

from bench.topologies import SERVICE, SentinelGroup, TlsRedis
from tests import services
from tests.celery.admission_support import deliver
from tests.celery.conftest import _with_db
from tests.celery.workers import BACKEND_DB, Cluster, wait_for
from tests.redis import sentinel_workerapp
from tests.redis.topologies import started
from xsm_celery.celery import Xsm
from xsm_celery.celery.fleet.admission import FLEET_COUNTERS
from xsm_celery.celery.fleet.plan import RateLimit
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence.opening import open_store
from xsm_celery.redis.concurrency import RedisSlots
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.inbox import RedisInbox
from xsm_celery.redis.markers import RedisAttemptMarkers
from xsm_celery.redis.rate_limit import RedisTokenBucket

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """A Sentinel group shared by the tests that do not fail it over."""
    yield from started(SentinelGroup(tmp_path_factory.mktemp("sentinel")))


@pytest.fixture
def failing_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """A Sentinel group of this test's own, which it fails over."""
    yield from started(SentinelGroup(tmp_path))


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    """A Redis that speaks only TLS."""
    yield from started(TlsRedis(tmp_path_factory.mktemp("tls")))


@pytest.fixture(params=["sentinel", "tls"])
def url(request: pytest.FixtureRequest) -> str:
    """The URL of each topology, in the spelling users write."""
    topology = request.getfixturevalue(
        "sentinel_group" if request.param == "sentinel" else "tls_redis"
    )
    return str(topology.url)


def _prefix() -> str:
    return f"xsm-topo-{uuid.uuid4().hex[:8]}:"


def test_fleet_bucket_and_slots_work_through_the_url(url: str) -> None:
    """A token bucket and a slot pool opened from the URL admit and refuse as on one Redis."""
    store = FleetRedis(url, prefix=_prefix())
    bucket = RedisTokenBucket(store, "b", 1, per=60, burst=2)
    assert [bucket.try_acquire().admitted for _ in range(3)] == [True, True, False]
    slots = RedisSlots(store, "s", 1)
    first, lease = slots.try_acquire()
    assert first.admitted
    assert lease is not None
    assert not slots.try_acquire()[0].admitted
    slots.release(lease.holder, 1.0, failed=False)
    assert slots.try_acquire()[0].admitted


def test_markers_and_inbox_open_from_the_url(url: str) -> None:
    """``open_store`` serves markers and an inbox for the URL, and both keep what they wrote."""
    markers = open_store(url, "markers", marker_ttl_s=60)
    task_id = uuid.uuid4().hex
    markers.mark(task_id, 3)
    assert markers.started(task_id) == 3
    inbox = open_store(url, "inbox")
    assert isinstance(inbox, RedisInbox)
    scope, key = "topo", uuid.uuid4().hex
    assert inbox.claim(scope, key, "fp", ttl_s=60)
    inbox.mark(scope, key, "done", ttl_s=60)
    entry = inbox.get(scope, key)
    assert entry is not None
    assert entry.receipt == "done"


def _fleet_app(url: str) -> Celery:
    app = Celery(f"topo-{uuid.uuid4().hex[:6]}", set_as_current=False)
    queue = f"xsm-topo-{uuid.uuid4().hex[:8]}"
    app.conf.update(
        broker_url="memory://",
        task_default_queue=queue,
        xsm_redis_url=url,
        xsm_fleet_prefix=_prefix(),
        xsm_dead_letter_store=f"memory://{queue}",
        xsm_attempt_markers="memory://",
    )
    return app


def test_a_failover_mid_run_is_followed_without_rebuilding_anything(
    failing_group: SentinelGroup,
) -> None:
    """Kill -9 the primary in the middle of a fleet-limited run.

    Until the sentinels promote the replica, the limit applies its on_redis_down choice
    ('open': the task runs, counted); after, the same clients reach the new primary, the
    bucket's replicated state still refuses the spent burst, and the markers and inbox keys
    written (and replicated) before the failover are there.
    """
    # Given a rate-limited task, markers and an inbox, all through the Sentinel URL
    url = failing_group.url
    app = _fleet_app(url)

    @Xsm(app).task(
        shared=False, name="t.limited", fleet_rate_limit=RateLimit("1/m", on_redis_down="open")
    )
    def limited() -> str:
        return "ran"

    store = FleetRedis(url, prefix=_prefix())
    slots = RedisSlots(store, "s", 1)
    markers = RedisAttemptMarkers(url, 600)
    inbox = RedisInbox(url)
    task_id, key = uuid.uuid4().hex, uuid.uuid4().hex
    assert deliver(limited) == "ran"
    with pytest.raises(Ignore):
        deliver(limited)  # the burst of one is spent: deferred
    _, lease = slots.try_acquire()
    assert lease is not None
    markers.mark(task_id, 2)
    markers.flush()
    assert inbox.claim("topo", key, "fp", ttl_s=600)
    old = failing_group.primary_port()
    assert failing_group.node("primary").execute_command("WAIT", 1, 2000) == 1

    # When the primary dies
    failing_group.kill_primary()

    # Then while no primary is known the limit runs the task, as on_redis_down='open' says
    before = FLEET_COUNTERS[("redis_down_open", "rate_limited")]
    assert deliver(limited) == "ran"
    assert FLEET_COUNTERS[("redis_down_open", "rate_limited")] == before + 1
    with pytest.raises(StoreUnavailableError):
        slots.try_acquire()

    # And once the replica is promoted, the same objects reach it
    new = failing_group.wait_promoted(old)
    assert new == failing_group.ports["replica"]
    with pytest.raises(Ignore):
        deliver(limited)  # the bucket's state survived: still deferred
    assert FLEET_COUNTERS[("redis_down_open", "rate_limited")] == before + 1
    assert not slots.try_acquire()[0].admitted  # the lease held before is still held
    assert markers.started(task_id) == 2
    markers.mark(key, 1)  # and the marker connection writes to the new primary
    markers.flush()
    assert markers.started(key) == 1
    assert failing_group.node("replica").get(f"xsm:attempt:{key}") == b"1"
    entry = inbox.get("topo", key)
    assert entry is not None
    assert entry.receipt is None  # the in-flight claim survived
    assert not inbox.claim("topo", key, "fp", ttl_s=600)


class _SentinelCluster(Cluster):
    """Workers of ``tests.redis.sentinel_workerapp``, whose broker is the Sentinel group."""

    def producer(self) -> Celery:
        """A producer on the same broker, with kombu's ``master_name`` transport option."""
        app = super().producer()
        app.conf.broker_transport_options = {"master_name": SERVICE}
        return app


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    parent = psutil.Process(proc.pid)
    for child in parent.children(recursive=True):
        child.send_signal(signal.SIGKILL)
    parent.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def _until_reconnected(cluster: Cluster) -> None:
    """Ping through the broker until this process's kombu connections follow the failover.

    The first broadcast this test process sends after the promotion can fail with
    "Connection closed by server" (a connection kombu opened before it); the worker and the
    package's own clients are not involved.
    """

    def pinged() -> bool:
        app = cluster.producer()
        try:
            app.control.ping(timeout=0.2)
        except redis.ConnectionError:
            return False
        finally:
            app.close()
        return True

    wait_for(pinged, 20, "a broker connection after the failover", every=0.2)


@pytest.mark.timeout(180)
def test_a_worker_lost_before_a_failover_is_still_a_lost_attempt_after_it(
    failing_group: SentinelGroup, tmp_path: Path
) -> None:
    """SIGKILL a worker mid-attempt, fail the broker's Redis over, start a new worker.

    The broker is sentinel:// with master_name in broker_transport_options, and the attempt
    markers follow it. The new worker gets the message back from the promoted replica, reads
    the marker written before the failover, counts the killed attempt as WorkerLost and
    retries; the task's function ran twice, not three times.
    """
    services.require("redis")
    hosts = ";".join(f"sentinel://127.0.0.1:{p}" for p in failing_group.sentinel_ports)
    cluster = _SentinelCluster(
        broker=hosts,
        backend=_with_db(services.REDIS_URL, BACKEND_DB),
        workdir=tmp_path,
        app="tests.redis.sentinel_workerapp",
    )
    results = redis.Redis.from_url(cluster.backend)
    tag = uuid.uuid4().hex
    try:
        # Given a worker in the middle of attempt 1
        first = cluster.start_worker("w1")
        sent = cluster.producer().send_task("tests.redis.sentinel_workerapp.hangs_once", args=[tag])
        wait_for(lambda: results.get(sentinel_workerapp.calls_key(tag)), 60, "attempt 1")
        # When the worker dies, and then the broker's primary (after replicating)
        _kill_tree(first)
        cluster.procs.remove(first)
        assert failing_group.node("primary").execute_command("WAIT", 1, 2000) == 1
        old = failing_group.primary_port()
        failing_group.kill_primary()
        failing_group.wait_promoted(old)
        _until_reconnected(cluster)
        # Then a new worker finds the message and the marker on the new primary
        cluster.start_worker("w2")
        assert sent.get(timeout=90) == f"survived:{tag}"
        causes = results.lrange(sentinel_workerapp.causes_key(tag), 0, -1)
        assert causes == [b"WorkerLost"]
        assert int(results.get(sentinel_workerapp.calls_key(tag)) or 0) == 2
    finally:
        cluster.close()
