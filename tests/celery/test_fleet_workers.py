"""Fleet limits held by real worker processes on real Redis (``tests/celery/fleetapp.py``)."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis as redis_lib

from tests.celery.fleet_cluster import RATE, FleetCluster, fleet_cluster, rate_over, times_of
from tests.celery.workers import wait_for
from tests.kombu.private_redis import PrivateRedis
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import AimdParams, RedisSlots
from xsm_celery.redis.fleet_store import FleetRedis

pytestmark = pytest.mark.slow


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[FleetCluster]:
    """A fleet cluster on the shared Redis (broker, results and fleet state)."""
    yield from fleet_cluster(tmp_path)


@pytest.fixture
def results(fleet: FleetCluster) -> redis_lib.Redis:
    """The Redis the task bodies record into."""
    return redis_lib.Redis.from_url(fleet.backend)


def test_a_fleet_rate_holds_across_two_workers_where_celerys_doubles(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Over 10 s two workers run the fleet-limited task at N/s within 10 %, Celery's at ~2N."""
    fleet.start_worker("r1", processes=2)
    fleet.start_worker("r2", processes=2)
    producer = fleet.producer()
    fleet_tag, celery_tag = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
    # Celery's limit is per worker: two workers run it at about 2N.
    for _ in range(int(RATE * 8)):
        producer.send_task("tests.celery.fleetapp.celery_rated", args=[celery_tag])
    wait_for(lambda: len(times_of(results, celery_tag)) >= RATE * 8, 60, "Celery-rated runs")
    times = times_of(results, celery_tag)
    celery_rate = rate_over(times, times[0] + 0.5, 3.0)
    assert celery_rate >= 1.6 * RATE, celery_rate
    for _ in range(int(RATE * 16)):
        producer.send_task("tests.celery.fleetapp.fleet_rated", args=[fleet_tag])
    wait_for(lambda: len(times_of(results, fleet_tag)) >= RATE * 13, 60, "13 s of fleet-rated runs")
    times = times_of(results, fleet_tag)
    measured = rate_over(times, times[0] + 1.0, 10.0)
    assert abs(measured - RATE) <= 0.1 * RATE, (measured, len(times))
    assert results.llen(f"xsm-test-fleet:{fleet_tag}:deferrals") > 0

    producer.close()


def test_a_fleet_concurrency_of_two_is_never_exceeded_by_four_processes(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Two workers with two processes each never run more than two bodies at once."""
    fleet.start_worker("c1", processes=2)
    fleet.start_worker("c2", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    sent = [producer.send_task("tests.celery.fleetapp.slotted", args=[tag, 0.3]) for _ in range(16)]
    for result in sent:
        result.get(timeout=90)
    seen = [int(v) for v in results.lrange(f"xsm-test-fleet:{tag}:seen", 0, -1)]
    assert len(seen) == 16
    assert max(seen) == 2
    assert results.llen(f"xsm-test-fleet:{tag}:deferrals") > 0
    producer.close()


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    parent = psutil.Process(proc.pid)
    for child in parent.children(recursive=True):
        child.send_signal(signal.SIGKILL)
    parent.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_the_slot_of_a_sigkilled_worker_is_reclaimed_after_its_lease(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """The only slot, held by a worker killed mid-task, goes to another worker within the lease."""
    victim = fleet.start_worker("victim")
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    producer.send_task("tests.celery.fleetapp.holder", args=[tag, 60.0])
    started = f"xsm-test-fleet:{tag}:started"
    wait_for(lambda: results.llen(started) == 1, 30, "the victim to take the slot")
    fleet.start_worker("heir")
    second = producer.send_task("tests.celery.fleetapp.holder", args=[tag, 0.1])
    wait_for(lambda: results.llen(f"xsm-test-fleet:{tag}:deferrals") >= 1, 30, "a deferral")
    killed_at = time.time()
    _kill_tree(victim)
    fleet.procs.remove(victim)
    second.get(timeout=30)
    entries = [e.decode() for e in results.lrange(started, 0, -1)]
    heir_start = float(entries[1].split(":", 1)[1])
    assert heir_start > killed_at
    assert heir_start - killed_at < 2.0 + 3.0  # the 2 s lease, plus at most one deferral
    producer.close()


def test_exactly_half_open_max_calls_probes_run_across_four_processes(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Twenty tasks waking at the end of a cooldown on 4 processes: exactly 2 probes run."""
    fleet.start_worker("p1", processes=2)
    fleet.start_worker("p2", processes=2)
    store = FleetRedis(fleet.fleet_redis, prefix=fleet.prefix)
    opener = FleetBreaker(
        store,
        "probes",
        check_interval_ms=0,
        failure_threshold=1,
        cooldown_ms=3_000,
        half_open_max_calls=2,
    )
    opener.record(opener.admit(), "failure")
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    for _ in range(20):
        producer.send_task("tests.celery.fleetapp.probed", args=[tag])
    calls = f"xsm-test-fleet:{tag}:calls"
    wait_for(lambda: results.llen(calls) >= 2, 30, "the probes")
    # The probes fail after 0.5 s and reopen the circuit for 3 s: count before it half-opens.
    wait_for(lambda: opener.state()["opened_count"] == 2, 15, "a failed probe to reopen it")
    assert results.llen(calls) == 2
    assert opener.state()["state"] == "open"
    producer.close()


def test_deferrals_never_use_up_an_attempt(fleet: FleetCluster, results: redis_lib.Redis) -> None:
    """Twelve two-attempt tasks deferred again and again by a 4/s limit all succeed."""
    fleet.start_worker("a1", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    sent = [
        producer.send_task("tests.celery.fleetapp.two_attempts", args=[tag, n]) for n in range(12)
    ]
    assert [r.get(timeout=90) for r in sent] == [f"done-{n}" for n in range(12)]
    assert results.llen(f"xsm-test-fleet:{tag}:deferrals") >= 6
    for n in range(12):
        assert int(results.get(f"xsm-test-fleet:{tag}:attempt-{n}") or 0) == 2
    producer.close()


def test_a_fleet_redis_restart_follows_each_options_choice_and_loses_no_task(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """While the fleet Redis is down 'open' tasks run, 'closed' ones wait; all run once after."""
    private = PrivateRedis()
    private.start()
    try:
        fleet.fleet_redis = private.url(0)
        worker = fleet.start_worker("d1", processes=2)
        producer = fleet.producer()
        tag = uuid.uuid4().hex[:8]
        sent = []
        for n in range(60):
            if n == 20:
                private.stop()
            if n == 40:
                time.sleep(2.0)
                private.start()
            sent.append(producer.send_task("tests.celery.fleetapp.down_open", args=[tag, n]))
            sent.append(
                producer.send_task("tests.celery.fleetapp.down_closed", args=[tag, 100 + n])
            )
            time.sleep(0.05)
        got = sorted(r.get(timeout=120) for r in sent)
        assert got == sorted([*range(60), *range(100, 160)])
        for n in [*range(60), *range(100, 160)]:
            assert int(results.get(f"xsm-test-fleet:{tag}:ran-{n}") or 0) == 1
        log = fleet.log("d1")
        assert "running the task without it (on_redis_down='open')" in log
        assert "redis_down" in log
        assert worker.poll() is None
        producer.close()
    finally:
        private.close()


def test_a_fleet_sliding_window_holds_across_two_workers(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Fifteen runs on 2 workers x 2 processes: never more than 5 in any 2 s, all of them run."""
    fleet.start_worker("w1", processes=2)
    fleet.start_worker("w2", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    sent = [producer.send_task("tests.celery.fleetapp.windowed", args=[tag]) for _ in range(15)]
    for result in sent:
        result.get(timeout=90)
    times = times_of(results, tag)
    assert len(times) == 15
    # Bodies record a moment after their admission (by Redis time): allow 0.2 s for that.
    busiest = max(sum(1 for t in times if start <= t < start + 1.8) for start in times)
    assert busiest <= 5, times
    assert times[10] - times[0] >= 4.0 - 0.2, times
    assert results.llen(f"xsm-test-fleet:{tag}:deferrals") > 0
    producer.close()


def test_an_aimd_pool_adapts_one_shared_limit_across_two_workers(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Fast runs on 4 processes grow the shared limit to 3, never past it; a failure halves it."""
    fleet.start_worker("m1", processes=2)
    fleet.start_worker("m2", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    pool = RedisSlots(
        FleetRedis(fleet.fleet_redis, prefix=fleet.prefix),
        "adaptive",
        aimd=AimdParams(
            initial=1, min_limit=1, max_limit=3, latency_target_ms=2_000, interval_s=0.2
        ),
    )
    sent = [
        producer.send_task("tests.celery.fleetapp.adaptive", args=[tag, 0.3, False])
        for _ in range(24)
    ]
    for result in sent:
        result.get(timeout=90)
    seen = [int(v) for v in results.lrange(f"xsm-test-fleet:{tag}:seen", 0, -1)]
    assert len(seen) == 24
    assert 2 <= max(seen) <= 3, seen
    assert pool.state()["limit"] == 3
    time.sleep(0.3)  # past the adjustment interval
    failing = producer.send_task("tests.celery.fleetapp.adaptive", args=[tag, 0.05, True])
    with pytest.raises(ConnectionError):
        failing.get(timeout=60)
    assert pool.state()["limit"] == 1  # floor(3 * 0.5)
    assert pool.state()["held"] == 0
    producer.close()


def test_renewal_keeps_a_short_lease_held_and_the_limit_exact(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Bodies three and a half 2 s leases long on four processes: never more than 2 at once."""
    fleet.start_worker("l1", processes=2)
    fleet.start_worker("l2", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    started = time.monotonic()
    sent = [
        producer.send_task("tests.celery.fleetapp.long_holder", args=[tag, 7.0]) for _ in range(4)
    ]
    for result in sent:
        result.get(timeout=90)
    seen = [int(v) for v in results.lrange(f"xsm-test-fleet:{tag}:seen", 0, -1)]
    assert len(seen) == 4
    assert max(seen) == 2
    assert time.monotonic() - started >= 14.0  # two rounds of two
    assert "ran out before it was renewed" not in fleet.log("l1") + fleet.log("l2")
    producer.close()
