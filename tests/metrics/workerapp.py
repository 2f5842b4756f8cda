"""The Celery app the real prefork worker of the observability tests runs.

Configured from the environment by ``tests/metrics/test_worker.py``: broker, results,
queue, the SQLite files of the stores, and the metrics port. Calls are counted in Redis,
since each prefork child has its own memory.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.patterns import CircuitBreaker, RetryPolicy

app = Celery("xsm_obs_worker")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-obs-tests"),
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://obs"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_obs_timers.db"),
    xsm_outbox_store=os.environ.get("XSM_TEST_OUTBOX"),
    xsm_timer_countdown_max_s=0.5,
    xsm_metrics_port=int(os.environ.get("XSM_TEST_METRICS_PORT", "0")),
    xsm_send_events=True,
)
xsm = Xsm(app)
_redis = redis.Redis.from_url(app.conf.result_backend)


def calls(tag: str) -> int:
    """Count one more call under ``tag``, in Redis."""
    key = f"xsm-obs-test:calls:{tag}"
    count = int(_redis.incr(key))
    _redis.expire(key, 600)
    return count


@xsm.task(name="obs.flaky", retry_policy=RetryPolicy(base_ms=5, jitter="none"))
def flaky(tag: str, failures: int, note: str = "") -> str:
    """Fails ``failures`` times with ConnectionError, then succeeds."""
    if calls(tag) <= failures:
        raise ConnectionError("upstream refused")
    return "ok"


@xsm.task(name="obs.doomed", give_up_on=(ValueError,))
def doomed(note: str) -> None:
    """Always refuses: a dead letter at the first attempt."""
    raise ValueError(f"refused {note}")


@xsm.task(name="obs.slow", retry_policy=RetryPolicy(base_ms=800, jitter="none"))
def slow(tag: str) -> str:
    """Fails once; its retry waits in a durable timer row."""
    if calls(tag) == 1:
        raise ConnectionError("try later")
    return "late"


#: Opens at the first failure, so one call of ``obs.trip`` opens it in that child.
breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=600_000, name="psp")


def _refuse() -> None:
    raise ConnectionError("psp down")


@app.task(name="obs.trip")
def trip() -> str:
    """Call the payment provider through the breaker once; it fails and opens the breaker."""
    try:
        breaker.call(_refuse)
    except ConnectionError:
        return breaker.state
    return "unexpected"
