"""The Celery app the fleet-limit worker tests run (``celery -A tests.celery.fleetapp worker``).

Configured from the environment like ``workerapp`` (broker, backend, queue, stores), plus
``XSM_TEST_FLEET_REDIS`` (the Redis holding the fleet state: the shared one or a private
one a test restarts), ``XSM_TEST_FLEET_PREFIX`` (fleet keys of this test only),
``XSM_TEST_RATE`` (the fleet rate N per second) and ``XSM_TEST_MAX_DEFERRAL_S``. Task bodies
record what they see in the backend's Redis under their tag, so the test can check what
happened inside the bodies.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.celery.fleet.admission import task_deferred
from xsm_celery.celery.fleet.plan import AIMD, Concurrency, RateLimit
from xsm_celery.patterns import RetryPolicy

RATE = float(os.environ.get("XSM_TEST_RATE", "10"))

app = Celery("xsm_fleet_tests")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-fleet-tests"),
    broker_transport_options={"visibility_timeout": 120},
    xsm_timer_countdown_max_s=60.0,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://fleetapp"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_fleet_timers.db"),
    xsm_redis_url=os.environ.get("XSM_TEST_FLEET_REDIS", "redis://127.0.0.1:6379/14"),
    xsm_fleet_prefix=os.environ.get("XSM_TEST_FLEET_PREFIX", "xsm-test-fleet:"),
    xsm_fleet_max_deferral_s=float(os.environ.get("XSM_TEST_MAX_DEFERRAL_S", "3600")),
    xsm_breakers={
        "probes": {"failure_threshold": 1, "cooldown_ms": 3_000, "half_open_max_calls": 2},
    },
)
xsm = Xsm(app)

_redis = redis.Redis.from_url(app.conf.result_backend)


def key(tag: str, what: str) -> str:
    """Where a task body under ``tag`` records ``what``."""
    return f"xsm-test-fleet:{tag}:{what}"


@task_deferred.connect
def _count_deferral(sender: Any = None, request: Any = None, reason: str = "", **_: Any) -> None:
    """Count each deferral by the tag the task ran under (its first argument)."""
    tag = request.args[0] if request is not None and request.args else "?"
    _redis.rpush(key(tag, "deferrals"), reason)


@xsm.task(shared=False, fleet_rate_limit=RateLimit(RATE, burst=1, key="fleet-rated"))
def fleet_rated(tag: str) -> None:
    """Record when the body ran."""
    _redis.rpush(key(tag, "times"), repr(time.time()))


@app.task(shared=False, rate_limit=f"{RATE:g}/s")
def celery_rated(tag: str) -> None:
    """Celery's own per-worker rate limit, for comparison."""
    _redis.rpush(key(tag, "times"), repr(time.time()))


@xsm.task(shared=False, fleet_concurrency=Concurrency(2, key=lambda tag, hold: tag, lease_s=3))
def slotted(tag: str, hold: float) -> None:
    """Count the bodies running at once, hold the slot, then leave."""
    running = _redis.incr(key(tag, "running"))
    _redis.rpush(key(tag, "seen"), running)
    try:
        time.sleep(hold)
    finally:
        _redis.decr(key(tag, "running"))


@xsm.task(shared=False, fleet_concurrency=Concurrency(1, key=lambda tag, hold: tag, lease_s=2))
def holder(tag: str, hold: float) -> None:
    """Take the only slot of ``tag`` and keep it for ``hold`` seconds."""
    _redis.rpush(key(tag, "started"), f"{os.getpid()}:{time.time()!r}")
    time.sleep(hold)


@xsm.task(shared=False, breaker="probes", retry_policy=RetryPolicy(max_attempts=1))
def probed(tag: str) -> None:
    """A call through the fleet breaker 'probes' that fails after half a second."""
    _redis.rpush(key(tag, "calls"), repr(time.time()))
    time.sleep(0.5)
    raise ConnectionError("the dependency is still down")


@xsm.task(
    shared=False,
    retry_policy=RetryPolicy(max_attempts=2, base_ms=50),
    fleet_rate_limit=RateLimit("4/s", burst=1, key=lambda tag, n: f"attempts-{tag}"),
)
def two_attempts(tag: str, n: int) -> str:
    """Fail the first attempt of each call, succeed on the second."""
    if _redis.incr(key(tag, f"attempt-{n}")) == 1:
        raise ConnectionError("first attempt fails")
    return f"done-{n}"


@xsm.task(shared=False, fleet_rate_limit=RateLimit("200/s", key="down-open"))
def down_open(tag: str, n: int) -> int:
    """Rate-limited, and run anyway while the fleet Redis is down."""
    _redis.incr(key(tag, f"ran-{n}"))
    return n


@xsm.task(
    shared=False,
    fleet_concurrency=Concurrency(8, key="down-closed", lease_s=5, on_redis_down="closed"),
)
def down_closed(tag: str, n: int) -> int:
    """Slot-limited, and deferred while the fleet Redis is down."""
    _redis.incr(key(tag, f"ran-{n}"))
    return n


@xsm.task(shared=False, fleet_rate_limit=RateLimit("5/2s", sliding=True, key="windowed"))
def windowed(tag: str) -> None:
    """Record when the body ran, under a fleet sliding window of 5 per 2 s."""
    _redis.rpush(key(tag, "times"), repr(time.time()))


@xsm.task(
    shared=False,
    retry_policy=RetryPolicy(max_attempts=1),
    fleet_concurrency=AIMD(
        initial=1,
        min_limit=1,
        max_limit=3,
        latency_target_ms=2_000,
        interval_s=0.2,
        key="adaptive",
        lease_s=5,
    ),
)
def adaptive(tag: str, hold: float, fail: bool) -> None:
    """Count the bodies running at once under an AIMD pool, hold, then succeed or fail."""
    running = _redis.incr(key(tag, "running"))
    _redis.rpush(key(tag, "seen"), running)
    try:
        time.sleep(hold)
    finally:
        _redis.decr(key(tag, "running"))
    if fail:
        raise ConnectionError("the dependency failed")


@xsm.task(
    shared=False, fleet_rate_limit=RateLimit("2/s", burst=1, key=lambda tag, api_key: api_key)
)
def per_api_key(tag: str, api_key: str) -> None:
    """Record a run under a per-key limit keyed on a secret-shaped argument."""
    _redis.rpush(key(tag, "times"), repr(time.time()))


@xsm.task(shared=False, fleet_concurrency=Concurrency(2, key=lambda tag, hold: tag, lease_s=2))
def long_holder(tag: str, hold: float) -> None:
    """Hold one of two slots (2 s leases) for ``hold`` seconds, counting the bodies at once."""
    running = _redis.incr(key(tag, "running"))
    _redis.rpush(key(tag, "seen"), running)
    try:
        time.sleep(hold)
    finally:
        _redis.decr(key(tag, "running"))
