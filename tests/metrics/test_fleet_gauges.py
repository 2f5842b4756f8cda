"""Fleet gauges read the fleet's Redis at scrape time; worker-local rows carry their age.

A bucket's tokens are refilled to the moment of the read and never negative, an elapsed
cooldown reads half-open without a write, the scrape's ``xsm_breaker_state`` follows Redis
(not a fact a process saw), and the status board of a worker drops what it cannot know.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests import services
from xsm_celery.celery.worker.status import fleet_states
from xsm_celery.hooks import Fact, FactKind
from xsm_celery.metrics.collector import StoreFiguresCollector
from xsm_celery.metrics.figures import Sources, read_figures
from xsm_celery.metrics.states import LOCAL_STATE_TTL_S, StateBoard
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.fleet_ops import list_fleet
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.rate_limit import RedisTokenBucket, level_at

OPTIONS = {"failure_threshold": 1, "cooldown_ms": 300}


@pytest.fixture
def store() -> Iterator[FleetRedis]:
    """A FleetRedis on the shared Redis under a prefix no other test uses."""
    services.require("redis")
    fleet = FleetRedis(services.REDIS_URL, prefix=f"xsm-test-gauges-{uuid.uuid4().hex[:8]}:")
    yield fleet
    keys = list(fleet.client.scan_iter(match=f"{fleet.prefix}*", count=500))
    if keys:
        fleet.client.delete(*keys)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(
    tokens=st.floats(-50, 50),
    stamped=st.floats(0, 1e6),
    later=st.floats(0, 1e6),
    gap=st.floats(0, 1e5),
    rate=st.floats(0, 10),
    burst=st.integers(1, 1000),
)
def test_a_bucket_level_is_never_negative_nor_above_its_burst(
    *, tokens: float, stamped: float, later: float, gap: float, rate: float, burst: int
) -> None:
    """Available and reserved are >= 0, available <= burst, and waiting never lowers it."""
    tokens = min(tokens, float(burst))
    now = stamped + later
    available, reserved = level_at(tokens, stamped, now, rate, burst)
    assert 0 <= available <= burst
    assert reserved >= 0
    assert available == 0 or reserved == 0
    after, _ = level_at(tokens, stamped, now + gap, rate, burst)
    assert after >= available


def test_a_quiet_bucket_reads_full_and_a_reserved_one_reads_zero(store: FleetRedis) -> None:
    """Reservations below zero show as reserved tokens; a read later shows the refill."""
    bucket = RedisTokenBucket(store, "pay", 5, burst=5)
    for _ in range(5):
        assert bucket.try_acquire().admitted
    for _ in range(3):
        assert bucket.try_acquire(reserve_max_ms=5_000).reserved
    [row] = list_fleet(store)
    assert row.detail["tokens"] == 0
    assert 2 <= float(row.detail["reserved"]) <= 3  # type: ignore[arg-type]
    assert row.state == "limited"
    assert bucket.state()["tokens"] == 0
    time.sleep(1.2)  # 5/s: the 3 reserved tokens are back and about 3 more
    [row] = list_fleet(store)
    assert row.detail["reserved"] == 0
    assert 2 <= float(row.detail["tokens"]) <= 5  # type: ignore[arg-type]
    assert row.detail["burst"] == 5
    time.sleep(1.0)
    [row] = list_fleet(store)
    assert row.detail["tokens"] == 5
    assert row.state == "ok"


def test_an_elapsed_cooldown_reads_half_open_without_a_write(store: FleetRedis) -> None:
    """The configured breaker reads half-open after its cooldown; Redis is not changed."""
    breaker = FleetBreaker(store, "psp", check_interval_ms=0, **OPTIONS)
    admitted = breaker.admit()
    breaker.record(admitted, "failure")
    [row] = list_fleet(store, {"psp": OPTIONS})
    assert row.state == "open"
    time.sleep(0.4)
    rev = store.client.hget(store.key(breaker.key), "rev")
    [row] = list_fleet(store, {"psp": OPTIONS})
    assert row.state == "half_open"
    assert store.client.hget(store.key(breaker.key), "rev") == rev
    [unconfigured] = list_fleet(store)
    assert unconfigured.state == "open"  # without its cooldown the stored state is shown


def _fleet_reader(url: str, prefix: str, breakers: dict[str, dict[str, int]]) -> Sources:
    """The fleet part of the Sources a worker and ``xsm status`` build for such an app."""
    app = Celery("gauges", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        xsm_redis_url=url,
        xsm_fleet_prefix=prefix,
        xsm_breakers=breakers,
    )
    return Sources(fleet=fleet_states(app))


def test_the_scrape_reads_the_breaker_and_the_bucket_from_redis(store: FleetRedis) -> None:
    """xsm_breaker_state follows Redis when another process closes it; tokens are live."""
    registry = CollectorRegistry()
    registry.register(
        StoreFiguresCollector(
            _fleet_reader(services.REDIS_URL, store.prefix, {"psp": OPTIONS}), cache_s=0
        )
    )
    breaker = FleetBreaker(store, "psp", check_interval_ms=0, **OPTIONS)
    breaker.record(breaker.admit(), "failure")
    bucket = RedisTokenBucket(store, "rate-psp", 2, burst=2)
    bucket.try_acquire()
    sample = registry.get_sample_value
    assert sample("xsm_breaker_state", {"breaker": "psp", "scope": "fleet"}) == 2
    tokens = sample("xsm_limit_tokens", {"limit": "rate-psp"})
    assert tokens is not None
    assert 1 <= tokens <= 2
    # Another process closes it: no fact reaches this one, the scrape still says closed.
    FleetBreaker(store, "psp", check_interval_ms=0, **OPTIONS).reset()
    assert sample("xsm_breaker_state", {"breaker": "psp", "scope": "fleet"}) == 0
    assert sample("xsm_store_up", {"store": "fleet"}) == 1


def test_a_fleet_that_cannot_be_read_is_down_not_stale() -> None:
    """An unreachable fleet Redis is xsm_store_up 0 and no breaker gauge at all."""
    dead = _fleet_reader("redis://127.0.0.1:1/0", "xsm-test-dead:", {})
    registry = CollectorRegistry()
    registry.register(StoreFiguresCollector(dead, cache_s=0))
    assert registry.get_sample_value("xsm_store_up", {"store": "fleet"}) == 0
    names = {s.name for family in registry.collect() for s in family.samples}
    assert "xsm_breaker_state" not in names
    figures = read_figures(dead)
    assert "fleet" in figures.errors
    assert figures.workers is None


def test_the_board_keeps_process_breakers_with_their_age_and_forgets_old_ones() -> None:
    """Fleet transitions are not the board's; a process row ages and expires."""
    board = StateBoard()
    board.handle(
        Fact(FactKind.BREAKER_TRANSITION, {"breaker": "pay", "to_state": "open", "scope": "fleet"})
    )
    board.handle(
        Fact(
            FactKind.BREAKER_TRANSITION, {"breaker": "psp", "to_state": "open", "scope": "process"}
        )
    )
    now = time.time()
    [row] = board.rows(now + 10)
    assert (row["name"], row["state"]) == ("psp", "open")
    assert 9 <= row["detail"]["age_s"] <= 11
    assert board.rows(now + LOCAL_STATE_TTL_S + 5) == []
