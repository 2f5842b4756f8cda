"""The Celery app the workflow tests' real worker and Beat processes run.

Configured from the environment by ``tests/celery/test_workflow_workers.py``: broker, queue,
the workflow store (a private PostgreSQL schema or a SQLite file) and a Redis database where
the slow action counts its starts, so the test sees a step that ran but never committed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery

from tests.celery.workflow_charts import order_machine
from xsm_celery.celery import Xsm
from xsm_celery.patterns import RetryPolicy

app = Celery("xsm_workflow_worker_tests")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-tests"),
    broker_transport_options={
        "visibility_timeout": 6,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://workflows"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_test_timers.db"),
    xsm_workflow_store=os.environ.get("XSM_TEST_WORKFLOW_STORE", "sqlite:///workflows.db"),
    xsm_timer_countdown_max_s=2.0,
)
xsm = Xsm(app)
app.conf.beat_schedule = xsm.beat_schedule(timers_every=0.25)

_redis = redis.Redis.from_url(app.conf.result_backend)
TAG = os.environ.get("XSM_TEST_TAG", "local")


def started_key() -> str:
    """Redis counter of the slow action's starts (committed or not)."""
    return f"xsm-test:wf-slow:{TAG}"


def slow(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Count the start in Redis, then take long enough for the test to kill the worker."""
    _redis.incr(started_key())
    time.sleep(float(event.payload.get("seconds", 2.5)))
    ctx["events"] += 1


@app.task(name="wf_tests.charge", acks_late=True)
def charge(amount: int) -> dict[str, int]:
    """The payment step: a negative amount is declined."""
    if amount < 0:
        raise ValueError(f"declined amount {amount}")
    return {"charged": amount}


policy = RetryPolicy(max_attempts=2, base_ms=50)
orders = xsm.workflow(order_machine(charge, slow=slow), name="orders", retry_policy=policy)
short = xsm.workflow(order_machine(charge, timeout_ms=1_500), name="short")
long = xsm.workflow(order_machine(charge, timeout_ms=4_000), name="long")
