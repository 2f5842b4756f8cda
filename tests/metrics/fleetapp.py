"""The Celery app two real workers on one host run for the whole-app exporter tests.

Its workers serve no port: they record into the shared ``PROMETHEUS_MULTIPROC_DIR`` the test
gives them, and one ``xsm-celery metrics`` process serves it. Plain Celery tasks (not chart
tasks) prove that every task of the app is counted; ``fleet.parked`` is routed to a queue no
worker consumes, so its messages wait there for ``celery_queue_length``.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.patterns import RetryPolicy

QUEUE = os.environ.get("XSM_TEST_QUEUE", "xsm-fleet-tests")
#: A queue the app routes to and no worker of the test consumes.
PARKED = f"{QUEUE}-parked"

app = Celery("xsm_fleet_metrics")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=QUEUE,
    task_routes={"fleet.parked": {"queue": PARKED}},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://fleet"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_fleet_timers.db"),
    xsm_outbox_store=os.environ.get("XSM_TEST_OUTBOX"),
)
xsm = Xsm(app)
_redis = redis.Redis.from_url(app.conf.result_backend)


@app.task(name="fleet.add")
def add(a: int, b: int) -> int:
    """A plain task that succeeds after a short nap (so both workers get some)."""
    time.sleep(0.05)
    return a + b


@app.task(name="fleet.boom")
def boom() -> None:
    """A plain task that fails."""
    raise KeyError("no such order")


@app.task(name="fleet.again", bind=True, max_retries=3)
def again(self: object, tag: str) -> str:
    """A plain task that asks Celery for one retry, then succeeds."""
    key = f"xsm-fleet-test:{tag}"
    if int(_redis.incr(key)) == 1:
        _redis.expire(key, 600)
        raise self.retry(countdown=0.05)  # type: ignore[attr-defined]
    return "done"


@xsm.task(name="fleet.refused", give_up_on=(ValueError,))
def refused() -> None:
    """A chart task that gives up at once: a dead letter in the store."""
    raise ValueError("refused")


@app.task(name="fleet.parked")
def parked() -> None:
    """Never runs in the test: no worker consumes its queue."""


@xsm.task(name="fleet.chart", retry_policy=RetryPolicy(max_attempts=2))
def chart() -> str:
    """A chart task: counted by the app-wide counters and by the xsm_* ones."""
    return "charted"
