"""The Celery app a real worker runs with its broker behind Sentinel (``celery -A ...``).

Configured from the environment by ``tests/redis/test_topologies.py``: the broker is a
``sentinel://`` URL in kombu's spelling with ``master_name`` in the transport options, and
the attempt markers follow it (``xsm_attempt_markers`` is not set). Call counts and retry
causes go to the result backend's Redis, which is not the one failed over.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import task_retry

from xsm_celery.celery import Xsm
from xsm_celery.patterns import RetryPolicy

#: The Sentinel service the broker names.
MASTER_NAME = "mymaster"

app = Celery("xsm_sentinel_worker_tests")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "sentinel://127.0.0.1:26379"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-tests"),
    # A short visibility timeout: a new worker restores the dead worker's message at once.
    broker_transport_options={"master_name": MASTER_NAME, "visibility_timeout": 2},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://sentinel-workerapp"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_test_timers.db"),
    xsm_timer_countdown_max_s=1.0,
)
xsm = Xsm(app)

_redis = redis.Redis.from_url(app.conf.result_backend)


def calls_key(tag: str) -> str:
    """Redis counter of the calls made under ``tag``."""
    return f"xsm-test:sentinel-calls:{tag}"


def causes_key(tag: str) -> str:
    """Redis list of the causes of the retries made under ``tag``."""
    return f"xsm-test:sentinel-causes:{tag}"


@task_retry.connect
def _record_retry(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    """Record each retry's cause under the task's tag (its first argument)."""
    cause = type(reason.exc).__name__ if reason.exc is not None else None
    _redis.rpush(causes_key(str(request.args[0])), str(cause))


@xsm.task(shared=False, retry_policy=RetryPolicy(max_attempts=3, base_ms=20, jitter="none"))
def hangs_once(tag: str) -> str:
    """Hang on the first call (the test kills the worker then), succeed on the next."""
    if int(_redis.incr(calls_key(tag))) == 1:
        time.sleep(300)
    return f"survived:{tag}"
