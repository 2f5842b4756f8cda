"""The fleet's Redis state on the shared Redis: buckets, windows, leased slots, AIMD, breakers."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests import services
from xsm_celery.errors import CircuitOpenError
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import AimdParams, LeaseRenewer, RedisSlots
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis
from xsm_celery.redis.rate_limit import RedisSlidingWindow, RedisTokenBucket


@pytest.fixture
def store() -> Iterator[FleetRedis]:
    """A FleetRedis on the shared Redis under a prefix no other test uses."""
    services.require("redis")
    fleet = FleetRedis(services.REDIS_URL, prefix=f"xsm-test-fleet-{uuid.uuid4().hex[:8]}:")
    yield fleet
    keys = list(fleet.client.scan_iter(match=f"{fleet.prefix}*", count=500))
    if keys:
        fleet.client.delete(*keys)


def test_a_bucket_admits_its_burst_then_says_when_to_come_back(store: FleetRedis) -> None:
    """Burst 3 at 1/min: three admitted, then refusals that take nothing and say ~60 s."""
    bucket = RedisTokenBucket(store, "b", 1, per=60, burst=3)
    decisions = [bucket.try_acquire() for _ in range(5)]
    assert [d.admitted for d in decisions] == [True, True, True, False, False]
    assert not any(d.reserved for d in decisions)
    assert 50_000 < decisions[3].wait_ms <= 60_000
    assert decisions[4].wait_ms <= decisions[3].wait_ms


def test_deferred_callers_are_spread_over_the_next_tokens(store: FleetRedis) -> None:
    """Ten reservations at 1/s get ten wake-up times a second apart, not one instant."""
    bucket = RedisTokenBucket(store, "spread", 1, burst=1)
    assert bucket.try_acquire().admitted
    decisions = [bucket.try_acquire(reserve_max_ms=10_000) for _ in range(10)]
    assert all(d.reserved and not d.admitted for d in decisions)
    waits = [d.wait_ms for d in decisions]
    gaps = [b - a for a, b in itertools.pairwise(waits)]
    assert all(900 <= gap <= 1001 for gap in gaps), gaps


def test_a_reservation_is_refused_past_its_bound_and_then_takes_nothing(
    store: FleetRedis,
) -> None:
    """A token due later than reserve_max_ms is not reserved, so the next caller is not pushed."""
    bucket = RedisTokenBucket(store, "bound", 10, burst=1)
    bucket.try_acquire()
    far = bucket.try_acquire(reserve_max_ms=20)
    assert not far.reserved
    assert not far.admitted
    assert bucket.try_acquire(reserve_max_ms=1_000).wait_ms <= far.wait_ms


def test_a_bucket_refills_from_redis_time(store: FleetRedis) -> None:
    """After the stated wait the denied call is admitted."""
    bucket = RedisTokenBucket(store, "refill", 20, burst=1)
    bucket.try_acquire()
    denied = bucket.try_acquire()
    assert not denied.admitted
    time.sleep(denied.wait_ms / 1000 + 0.02)
    assert bucket.try_acquire().admitted


def test_racing_threads_never_share_the_last_token(store: FleetRedis) -> None:
    """Sixteen threads, each with its own connection, on a bucket of five: five admitted."""
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def take() -> None:
        own = FleetRedis(services.REDIS_URL, prefix=store.prefix)
        barrier.wait(timeout=10)
        results.append(RedisTokenBucket(own, "race", 1, per=600, burst=5).try_acquire().admitted)

    threads = [threading.Thread(target=take) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sum(results) == 5
    assert len(results) == 16


def test_a_sliding_window_holds_at_most_limit_per_window(store: FleetRedis) -> None:
    """Limit 3 per 2 s: three admitted, then a wait until the oldest leaves the window."""
    window = RedisSlidingWindow(store, "w", 3, 2.0)
    decisions = [window.try_acquire() for _ in range(4)]
    assert [d.admitted for d in decisions] == [True, True, True, False]
    assert 0 < decisions[3].wait_ms <= 2000
    time.sleep(decisions[3].wait_ms / 1000 + 0.02)
    assert window.try_acquire().admitted


def test_slots_are_limited_and_released(store: FleetRedis) -> None:
    """Two slots: the third holder waits; a release lets it in."""
    slots = RedisSlots(store, "s", 2, lease_s=5)
    first, second, third = (slots.try_acquire() for _ in range(3))
    assert first[0].admitted
    assert second[0].admitted
    assert not third[0].admitted
    assert 0 < third[0].wait_ms <= 5000
    assert first[1] is not None
    slots.release(first[1].holder, 10, failed=False)
    assert slots.try_acquire()[0].admitted


def test_a_dead_holders_slot_is_reclaimed_after_its_lease(store: FleetRedis) -> None:
    """A slot never renewed or released frees itself once its 2 s lease (the floor) ends."""
    slots = RedisSlots(store, "dead", 1, lease_s=2.0)
    assert slots.try_acquire()[0].admitted
    assert not slots.try_acquire()[0].admitted
    time.sleep(2.05)
    assert slots.try_acquire()[0].admitted


def test_renewal_keeps_a_slot_past_its_lease(store: FleetRedis) -> None:
    """A renewed lease outlives its first 2 s; a lost one is reported as lost."""
    slots = RedisSlots(store, "renew", 1, lease_s=2.0)
    renewer = LeaseRenewer()
    _decision, lease = slots.try_acquire()
    assert lease is not None
    renewer.hold(lease)
    time.sleep(2.7)
    assert not slots.try_acquire()[0].admitted
    renewer.drop(lease)
    time.sleep(2.1)
    assert slots.renew([lease.holder]) == [lease.holder]


def test_aimd_moves_the_shared_limit_once_per_interval(store: FleetRedis) -> None:
    """Fast successes add one per interval, an error halves it, never below min or above max."""
    params = AimdParams(initial=2, min_limit=1, max_limit=3, interval_s=1.0, latency_target_ms=50)
    pool = RedisSlots(store, "aimd", aimd=params)
    limits = []
    for failed, held in [(False, 5), (False, 5), (True, 5), (False, 80)]:
        _, lease = pool.try_acquire()
        assert lease is not None
        limits.append(pool.release(lease.holder, held, failed))
        _, lease = pool.try_acquire()
        assert lease is not None
        limits.append(pool.release(lease.holder, held, failed))  # same interval: no change
        time.sleep(1.05)
    assert limits == [3, 3, 3, 3, 1, 1, 1, 1]
    assert pool.state()["limit"] == 1


def _breaker(store: FleetRedis, name: str, **options: object) -> FleetBreaker:
    return FleetBreaker(store, name, check_interval_ms=0, **options)  # type: ignore[arg-type]


def test_a_fleet_breaker_trips_cools_down_by_redis_time_and_closes(store: FleetRedis) -> None:
    """Two failures open it; it refuses with the time left; after it, one probe closes it."""
    breaker = _breaker(store, "trip", failure_threshold=2, cooldown_ms=1_000)
    for _ in range(2):
        breaker.record(breaker.admit(), "failure")
    with pytest.raises(CircuitOpenError) as refused:
        breaker.admit()
    assert refused.value.retry_after_ms is not None
    assert 0 < refused.value.retry_after_ms <= 1_000
    time.sleep(1.05)
    probe = breaker.admit()
    assert probe.probe
    with pytest.raises(CircuitOpenError):
        breaker.admit()
    breaker.record(probe, "success")
    assert breaker.state()["state"] == "closed"
    assert breaker.state()["opened_count"] == 1


def test_another_process_sees_the_trip(store: FleetRedis) -> None:
    """A second breaker object on the same name (another worker) is refused after the trip."""
    first = _breaker(store, "shared", failure_threshold=1, cooldown_ms=10_000)
    second = _breaker(store, "shared", failure_threshold=1, cooldown_ms=10_000)
    first.record(first.admit(), "failure")
    with pytest.raises(CircuitOpenError):
        second.admit()


def test_exactly_half_open_max_calls_probes_across_racing_workers(store: FleetRedis) -> None:
    """Eight breaker objects released at once on a cooled-down breaker: exactly two probes."""
    name = "probes"
    opts = {"failure_threshold": 1, "cooldown_ms": 50, "half_open_max_calls": 2}
    opener = _breaker(store, name, **opts)
    opener.record(opener.admit(), "failure")
    time.sleep(0.08)
    barrier = threading.Barrier(8)
    admitted: list[bool] = []

    def race() -> None:
        own = _breaker(FleetRedis(services.REDIS_URL, prefix=store.prefix), name, **opts)
        barrier.wait(timeout=10)
        try:
            admitted.append(own.admit().probe)
        except CircuitOpenError:
            admitted.append(False)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(admitted) == 8
    assert sum(admitted) == 2


def test_a_stale_outcome_is_dropped(store: FleetRedis) -> None:
    """A failure admitted before a reset cannot count against the fresh window."""
    breaker = _breaker(store, "stale", failure_threshold=1, cooldown_ms=10_000)
    old = breaker.admit()
    breaker.reset()
    breaker.record(old, "failure")
    assert breaker.state()["state"] == "closed"
    assert breaker.state()["failures"] == 0


def test_a_lost_probe_counts_as_failed_after_its_timeout(store: FleetRedis) -> None:
    """A probe that never reports reopens the circuit once probe_timeout_ms passed."""
    breaker = FleetBreaker(
        store,
        "lost",
        check_interval_ms=0,
        probe_timeout_ms=1_000,
        failure_threshold=1,
        cooldown_ms=50,
    )
    breaker.record(breaker.admit(), "failure")
    time.sleep(0.07)
    assert breaker.admit().probe
    time.sleep(1.05)
    with pytest.raises(CircuitOpenError):
        breaker.admit()
    assert breaker.state()["opened_count"] == 2


def test_the_failure_rate_trips_the_fleet_breaker(store: FleetRedis) -> None:
    """Half failures over a window of four trip a breaker whose consecutive limit is high."""
    breaker = _breaker(
        store, "rate", failure_threshold=100, failure_rate_threshold=0.5, window_size=4
    )
    for outcome in ["success", "failure", "success", "failure"]:
        breaker.record(breaker.admit(), outcome)
    assert breaker.state()["state"] == "open"


def test_the_closed_state_costs_no_round_trip_per_call(store: FleetRedis) -> None:
    """After the first read, a hundred closed successes within the interval touch no Redis."""
    breaker = FleetBreaker(store, "cheap", check_interval_ms=60_000)
    breaker.record(breaker.admit(), "success")
    calls: list[str] = []
    original = store.run

    def counting(name: str, keys: object, args: object) -> object:
        calls.append(name)
        return original(name, keys, args)  # type: ignore[arg-type]

    store.run = counting  # type: ignore[method-assign]
    for _ in range(100):
        breaker.record(breaker.admit(), "success")
    assert calls == []
    breaker.record(breaker.admit(), "failure")
    assert calls == ["BREAKER_LOAD", "BREAKER_CAS"]


def test_the_index_lists_every_key_and_forget_removes_it(store: FleetRedis) -> None:
    """Each kind used shows up in the index; forget deletes its state."""
    RedisTokenBucket(store, "i-rate", 5).try_acquire()
    RedisSlots(store, "i-slots", 1).try_acquire()
    _breaker(store, "i-breaker").admit()
    kinds = {(k.kind, k.name) for k, _ in store.indexed()}
    assert {("rate", "i-rate"), ("slots", "i-slots"), ("breaker", "i-breaker")} <= kinds
    store.forget(FleetKey("rate", "i-rate"))
    assert ("rate", "i-rate") not in {(k.kind, k.name) for k, _ in store.indexed()}


def test_a_transition_fact_subscriber_may_read_the_breaker(store: FleetRedis) -> None:
    """A subscriber reading the breaker's state on its trip sees 'open' and does not hang."""
    from xsm_celery import hooks

    breaker = _breaker(store, "observed", failure_threshold=1)
    seen: list[object] = []

    def on_fact(fact: hooks.Fact) -> None:
        if fact.kind is hooks.FactKind.BREAKER_TRANSITION:
            seen.append((fact.fields["to_state"], breaker.state()["state"]))

    stop = hooks.subscribe(on_fact)
    try:
        breaker.record(breaker.admit(), "failure")
    finally:
        stop()
    assert seen == [("open", "open")]
