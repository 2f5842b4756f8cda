"""Admission of fleet-limited chart tasks, one delivery at a time, on real Redis.

Each test builds a Celery app whose broker is kombu's memory transport (so a deferral's
re-published message can be read back) and whose fleet state is the shared Redis under a
prefix of its own, then runs deliveries in the test process with a pushed request, as a
worker would.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Ignore, Retry
from hypothesis import given
from hypothesis import strategies as st

from tests import services
from tests.celery.admission_support import app_factory, closed_port, deliver
from tests.celery.queues import drain_queue
from xsm_celery import hooks
from xsm_celery.celery import Xsm
from xsm_celery.celery.fleet.admission import (
    DEFERRAL_HEADER,
    FLEET_COUNTERS,
    jittered_countdown,
    task_deferred,
)
from xsm_celery.celery.fleet.plan import AIMD, Concurrency, RateLimit, parse_rate
from xsm_celery.errors import ConfigurationError, DeferredTooLongError
from xsm_celery.patterns import RetryPolicy
from xsm_celery.sqlalchemy.urls import open_dead_letter_store


@pytest.fixture
def make_app() -> Iterator[Callable[..., Celery]]:
    """Apps on a memory broker with the fleet on the shared Redis, cleaned up after."""
    yield from app_factory()


def define(app: Celery, **options: Any) -> Any:
    """Define and bind a no-op chart task with ``options`` (binding runs the checks)."""
    name = f"t.defined{uuid.uuid4().hex[:6]}"

    def noop() -> None:
        """Does nothing."""

    Xsm(app).task(name=name, shared=False, **options)(noop)
    return app.tasks[name]


@pytest.fixture
def facts() -> Iterator[list[hooks.Fact]]:
    """The facts emitted during the test."""
    seen: list[hooks.Fact] = []
    stop = hooks.subscribe(seen.append)
    yield seen
    stop()


def test_a_task_over_its_fleet_rate_is_deferred_not_failed(
    make_app: Callable[..., Celery], facts: list[hooks.Fact], caplog: pytest.LogCaptureFixture
) -> None:
    """The second call within a 1/min bucket is re-published with a countdown and ignored."""
    app = make_app()
    xsm = Xsm(app)
    ran: list[int] = []

    @xsm.task(shared=False, name="t.rated", fleet_rate_limit=RateLimit("1/m", burst=1))
    def rated(n: int) -> int:
        ran.append(n)
        return n

    signals: list[dict[str, Any]] = []

    def on_deferred(sender: Any = None, **kw: Any) -> None:
        signals.append(kw)

    task_deferred.connect(on_deferred, weak=False)
    try:
        assert deliver(rated, 1) == 1
        with (
            caplog.at_level(logging.INFO, logger="xsm_celery.celery.fleet.admission"),
            pytest.raises(Ignore),
        ):
            deliver(rated, 2, headers={"xsm_chart": '{"context": {"attempt": 0}}'})
    finally:
        task_deferred.disconnect(on_deferred)
    assert ran == [1]
    [message] = drain_queue(app)
    assert message.headers["task"] == "t.rated"
    assert message.headers["xsm_chart"] == '{"context": {"attempt": 0}}'
    history = json.loads(message.headers[DEFERRAL_HEADER])
    assert (history["count"], history["reason"]) == (1, "rate_limited")
    assert message.headers["eta"] is not None
    assert message.headers["retries"] == 0
    assert signals[0]["reason"] == "rate_limited"
    assert 1 <= signals[0]["countdown"] <= 300
    assert "deferred t.rated" in caplog.text
    # Both facts name the limit (the metrics' ``limit`` label, the status board's row).
    limit = signals[0]["limit"]
    assert limit
    admitted = [f.fields for f in facts if f.kind is hooks.FactKind.LIMIT_ADMITTED]
    deferred = [f.fields for f in facts if f.kind is hooks.FactKind.LIMIT_DEFERRED]
    assert [(f["limit"], f["task"]) for f in admitted] == [(limit, "t.rated")]
    assert [(f["limit"], f["reason"]) for f in deferred] == [(limit, "rate_limited")]


def test_a_task_deferred_past_the_bound_is_dead_lettered_with_its_own_reason(
    make_app: Callable[..., Celery],
) -> None:
    """A delivery whose first deferral is older than the bound becomes a dead letter."""
    app = make_app(xsm_fleet_max_deferral_s=60)
    xsm = Xsm(app)

    @xsm.task(shared=False, name="t.starved", fleet_concurrency=Concurrency(1, key="starved"))
    def starved() -> None:
        raise AssertionError("never admitted")

    from xsm_celery.redis.concurrency import RedisSlots
    from xsm_celery.redis.fleet_store import FleetRedis

    store = FleetRedis(services.REDIS_URL, prefix=app.conf.xsm_fleet_prefix)
    RedisSlots(store, "starved", 1, lease_s=60).try_acquire()
    # Redis' record says the first deferral was two minutes ago, 41 deferrals since.
    task_id = str(uuid.uuid4())
    first_ms = int(store.server_time() * 1000) - 120_000
    store.client.hset(
        f"{store.prefix}deferrals:{task_id}", mapping={"first": first_ms, "count": 41}
    )
    with pytest.raises(DeferredTooLongError) as raised:
        deliver(starved, task_id=task_id)
    assert raised.value.deferrals == 42
    [record] = open_dead_letter_store(app.conf.xsm_dead_letter_store).list()
    assert record.reason == "deferred_too_long"
    assert record.task_name == "t.starved"
    assert drain_queue(app) == []


def test_redis_down_follows_each_options_choice(
    make_app: Callable[..., Celery], facts: list[hooks.Fact], caplog: pytest.LogCaptureFixture
) -> None:
    """With Redis unreachable an 'open' limit runs the task and warns; a 'closed' one defers."""
    app = make_app(xsm_redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    xsm = Xsm(app)

    @xsm.task(shared=False, name="t.open", fleet_rate_limit=RateLimit("5/s", on_redis_down="open"))
    def opened() -> str:
        return "ran"

    @xsm.task(
        shared=False, name="t.closed", fleet_concurrency=Concurrency(2, on_redis_down="closed")
    )
    def closed() -> str:
        return "ran"

    before = FLEET_COUNTERS[("redis_down_open", "rate_limited")]
    with caplog.at_level(logging.WARNING, logger="xsm_celery.celery.fleet.admission"):
        assert deliver(opened) == "ran"
    assert FLEET_COUNTERS[("redis_down_open", "rate_limited")] == before + 1
    assert "running the task without it (on_redis_down='open')" in caplog.text
    with pytest.raises(Ignore):
        deliver(closed)
    [message] = drain_queue(app)
    assert json.loads(message.headers[DEFERRAL_HEADER])["reason"] == "redis_down"
    downs = [f.fields["choice"] for f in facts if f.kind is hooks.FactKind.BACKEND_UNAVAILABLE]
    assert downs == ["open", "closed"]


def test_failures_trip_the_fleet_breaker_and_then_defer_until_the_cooldown(
    make_app: Callable[..., Celery], facts: list[hooks.Fact]
) -> None:
    """Two failing runs open 'pay'; the next delivery is deferred by about the cooldown."""
    name = f"pay-{uuid.uuid4().hex[:6]}"
    app = make_app(xsm_breakers={name: {"failure_threshold": 2, "cooldown_ms": 20_000}})
    xsm = Xsm(app)

    @xsm.task(shared=False, name="t.pay", breaker=name, retry_policy=RetryPolicy(max_attempts=1))
    def pay() -> None:
        raise ConnectionError("gateway down")

    for _ in range(2):
        with pytest.raises(ConnectionError):
            deliver(pay)
    drain_queue(app)  # nothing: failures dead-letter, they are not deferrals
    with pytest.raises(Ignore):
        deliver(pay)
    [message] = drain_queue(app)
    assert json.loads(message.headers[DEFERRAL_HEADER])["reason"] == "breaker_open"
    transitions = [f.fields for f in facts if f.kind is hooks.FactKind.BREAKER_TRANSITION]
    assert transitions == [
        {"breaker": name, "from_state": "closed", "to_state": "open", "scope": "fleet"}
    ]


def test_a_scheduled_retry_counts_as_a_failure_for_the_fleet_breaker(
    make_app: Callable[..., Celery], facts: list[hooks.Fact]
) -> None:
    """A failure the chart retries (not only one it gives up on) is reported to the breaker."""
    name = f"pay-{uuid.uuid4().hex[:6]}"
    app = make_app(xsm_breakers={name: {"failure_threshold": 2, "cooldown_ms": 20_000}})
    xsm = Xsm(app)

    @xsm.task(
        shared=False,
        name="t.pay.retrying",
        breaker=name,
        retry_policy=RetryPolicy(max_attempts=5, base_ms=1),
    )
    def pay() -> None:
        raise ConnectionError("gateway down")

    for _ in range(2):
        with pytest.raises(Retry):
            deliver(pay)
    transitions = [f.fields for f in facts if f.kind is hooks.FactKind.BREAKER_TRANSITION]
    assert transitions == [
        {"breaker": name, "from_state": "closed", "to_state": "open", "scope": "fleet"}
    ]
    admitted = [f.fields["limit"] for f in facts if f.kind is hooks.FactKind.LIMIT_ADMITTED]
    assert admitted == [name, name]
    drain_queue(app)  # the two retries
    with pytest.raises(Ignore):
        deliver(pay)
    [message] = drain_queue(app)
    assert json.loads(message.headers[DEFERRAL_HEADER])["reason"] == "breaker_open"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fleet_rate_limit": "fast"}, "is not a rate"),
        ({"fleet_concurrency": 0}, "fleet_concurrency=0 is out of range: a whole number from 1"),
        ({"fleet_concurrency": "3"}, "must be an integer, Concurrency(3) or AIMD"),
        ({"breaker": "paymnets"}, "unknown breaker 'paymnets'; did you mean 'payments'? Valid"),
        ({"breaker": "zzz"}, "unknown breaker 'zzz'. Valid names: payments (the breakers"),
    ],
)
def test_bad_options_are_refused_when_the_task_is_defined(
    make_app: Callable[..., Celery], options: dict[str, Any], message: str
) -> None:
    """A bad fleet option is a ConfigurationError naming the fix, before any task runs."""
    app = make_app(xsm_breakers={"payments": {"failure_threshold": 5}})
    with pytest.raises(ConfigurationError) as raised:
        define(app, **options)
    assert message in str(raised.value)


def test_fleet_options_without_a_redis_are_refused(
    make_app: Callable[..., Celery], tmp_path: Path
) -> None:
    """An AMQP broker and no xsm_redis_url: the error says to set xsm_redis_url."""
    app = make_app(
        xsm_redis_url=None,
        broker_url="amqp://guest@127.0.0.1//",
        xsm_attempt_markers=f"sqlite:///{tmp_path / 'markers.db'}",
    )
    with pytest.raises(ConfigurationError, match="xsm_redis_url"):
        define(app, fleet_concurrency=3)


def test_aimd_options_are_checked() -> None:
    """An AIMD whose bounds do not hold is refused with the bounds in the message."""
    with pytest.raises(ConfigurationError, match="min_limit <= initial <= max_limit"):
        AIMD(initial=10, max_limit=4)


@given(
    count=st.integers(min_value=1, max_value=10_000),
    per=st.sampled_from(["", "2", "10", "0.5"]),
    unit=st.sampled_from(["s", "m", "h"]),
)
def test_parse_rate_reads_count_per_period(count: int, per: str, unit: str) -> None:
    """'N/Pu' is N per P units of u; a missing P means 1."""
    got_count, per_s = parse_rate(f"{count}/{per}{unit}")
    assert got_count == count
    assert per_s == pytest.approx((float(per) if per else 1.0) * {"s": 1, "m": 60, "h": 3600}[unit])


@given(wait_ms=st.floats(min_value=0, max_value=3_600_000), u=st.floats(min_value=0, max_value=1))
def test_the_jitter_stays_near_the_expected_moment(wait_ms: float, u: float) -> None:
    """The countdown is within 25 ms (or 5 %) of the expected moment and never negative."""
    countdown = jittered_countdown(wait_ms, rng=lambda: u)
    wait_s = wait_ms / 1000.0
    assert countdown >= 0
    assert abs(countdown - wait_s) <= min(0.025, max(0.005, wait_s * 0.05)) + 1e-9


def test_a_key_callable_gives_each_customer_its_own_limit(
    make_app: Callable[..., Celery],
) -> None:
    """With key=customer, customer 'a' is deferred on its second call while 'b' still runs."""
    app = make_app()
    xsm = Xsm(app)
    ran: list[str] = []

    @xsm.task(
        shared=False,
        name="t.per_customer",
        fleet_rate_limit=RateLimit("1/m", burst=1, key=lambda customer: customer),
    )
    def per_customer(customer: str) -> None:
        ran.append(customer)

    deliver(per_customer, "a")
    with pytest.raises(Ignore):
        deliver(per_customer, "a")
    deliver(per_customer, "b")
    assert ran == ["a", "b"]
    [message] = drain_queue(app)
    assert json.loads(message.headers[DEFERRAL_HEADER])["reason"] == "rate_limited"


def test_a_sliding_window_option_defers_past_its_limit(make_app: Callable[..., Celery]) -> None:
    """RateLimit('2/10s', sliding=True): two runs, the third is deferred."""
    app = make_app()
    xsm = Xsm(app)
    ran: list[int] = []

    @xsm.task(
        shared=False,
        name="t.window",
        fleet_rate_limit=RateLimit("2/10s", sliding=True, key="window"),
    )
    def windowed(n: int) -> None:
        ran.append(n)

    deliver(windowed, 1)
    deliver(windowed, 2)
    with pytest.raises(Ignore):
        deliver(windowed, 3)
    assert ran == [1, 2]


def test_an_aimd_pool_grows_after_a_fast_success(make_app: Callable[..., Celery]) -> None:
    """An AIMD pool starting at 1 slot reports its fast run and the fleet limit becomes 2."""
    app = make_app()
    xsm = Xsm(app)

    @xsm.task(
        shared=False,
        name="t.adaptive",
        fleet_concurrency=AIMD(initial=1, max_limit=2, key="adaptive"),
    )
    def adaptive() -> str:
        return "ok"

    assert deliver(adaptive) == "ok"
    from xsm_celery.redis.concurrency import AimdParams, RedisSlots
    from xsm_celery.redis.fleet_store import FleetRedis

    store = FleetRedis(services.REDIS_URL, prefix=app.conf.xsm_fleet_prefix)
    pool = RedisSlots(store, "adaptive", aimd=AimdParams(initial=1, max_limit=2))
    assert pool.state()["limit"] == 2
    assert pool.state()["held"] == 0
