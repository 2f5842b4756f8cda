"""The Celery app that the real worker processes in these tests run (``celery -A ...``).

Configured from the environment by the fixtures in ``tests/celery/workers.py``: broker,
result backend, queue, and the SQLite files of the dead-letter and timer stores. Tasks count
their calls in Redis, and a ``task_retry`` handler records every retry's countdown there, so
the test process can check exactly what the worker did.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import task_retry

from xsm_celery.celery import ChartTask, Xsm
from xsm_celery.celery.signals import circuit_opened
from xsm_celery.engine import MachineLogic
from xsm_celery.errors import CircuitOpenError
from xsm_celery.patterns import CircuitBreakerRegistry, RetryPolicy

#: Seed of the jittered task's rng; the test draws the same sequence to predict countdowns.
JITTER_SEED = 20240611

#: The jittered task's policy, minus the rng (the test rebuilds it with a fresh one).
JITTER_POLICY = {"max_attempts": 4, "base_ms": 40, "factor": 2.0, "jitter": "full"}

CHARTS = Path(__file__).resolve().parent / "charts"

app = Celery("xsm_worker_tests")
app.conf.update(
    broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-tests"),
    broker_transport_options={"visibility_timeout": 30},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "memory://workerapp"),
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_test_timers.db"),
    xsm_timer_countdown_max_s=2.0,
    worker_send_task_events=os.environ.get("XSM_TEST_TASK_EVENTS") == "1",
)
xsm = Xsm(app)
app.conf.beat_schedule = xsm.beat_schedule(timers_every=0.25)

_redis = redis.Redis.from_url(app.conf.result_backend)


def events_key(task_id: str) -> str:
    """Redis list where the worker records a task's retries."""
    return f"xsm-test:retries:{task_id}"


def calls_key(tag: str) -> str:
    """Redis counter of the calls made under ``tag``."""
    return f"xsm-test:calls:{tag}"


def _count(tag: str) -> int:
    return int(_redis.incr(calls_key(tag)))


def tracebacks_key(task_id: str) -> str:
    """Redis list where the worker records the traceback text of each ``task_retry`` einfo."""
    return f"xsm-test:retry-tracebacks:{task_id}"


@task_retry.connect
def _record_retry(
    sender: Any = None, request: Any = None, reason: Any = None, einfo: Any = None, **_: Any
) -> None:
    """Record each retry's task id, countdown and cause, in order, and its einfo's text."""
    when = reason.when if isinstance(reason.when, int | float) else str(reason.when)
    cause = type(reason.exc).__name__ if reason.exc is not None else None
    _redis.rpush(events_key(request.id), repr((request.id, when, cause)))
    _redis.rpush(tracebacks_key(request.id), einfo.traceback)


@app.task(
    shared=False,
    base=ChartTask,
    retry_policy=RetryPolicy(**JITTER_POLICY, rng=random.Random(JITTER_SEED).random),
)
def jittered(tag: str, failures: int) -> str:
    """Fail ``failures`` times with ConnectionError, then succeed."""
    if _count(tag) <= failures:
        raise ConnectionError(f"upstream 503 for {tag}")
    return f"ok:{tag}"


@xsm.task(shared=False, retry_policy=RetryPolicy(max_attempts=2, base_ms=1500, jitter="none"))
def retried_later(tag: str) -> str:
    """Fail once with ConnectionError, then succeed on the retry 1.5 s later."""
    if _count(tag) == 1:
        raise ConnectionError(f"upstream 503 for {tag}")
    return f"ok:{tag}"


@xsm.task(shared=False, retry_policy=RetryPolicy(max_attempts=3, base_ms=20, jitter="none"))
def exhausted(tag: str, card_token: str = "tok_live_4242") -> None:
    """Always fail, so the third failure dead-letters."""
    raise ConnectionError(f"attempt {_count(tag)} refused")


@xsm.task(
    shared=False,
    retry_policy=RetryPolicy(max_attempts=5, base_ms=20, jitter="none"),
    give_up_on=(ValueError,),
)
def refuses(tag: str) -> None:
    """Fail once with a retryable error, then with a ValueError the task gives up on."""
    if _count(tag) == 1:
        raise ConnectionError("first try: timeout")
    raise ValueError("amount must be positive")


def _note_decline(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["declines"] = int(ctx.get("declines", 0)) + 1


@xsm.task(
    shared=False,
    retry_policy=RetryPolicy(max_attempts=2, base_ms=20, jitter="none"),
    retry_chart=str(CHARTS / "payment_retry.json"),
    chart_logic=MachineLogic(actions={"noteDecline": _note_decline}),
)
def pays(tag: str) -> None:
    """Always declined, through a custom chart with an action of its own."""
    raise ConnectionError(f"card declined ({_count(tag)})")


@xsm.task(shared=False, retry_policy=RetryPolicy(max_attempts=3, base_ms=20, jitter="none"))
def kills_worker(tag: str, times: int) -> str:
    """SIGKILL the process running it on the first ``times`` calls, then succeed."""
    if _count(tag) <= times:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"survived:{tag}"


@xsm.task(shared=False, retry_policy=RetryPolicy(max_attempts=3, base_ms=2500, jitter="none"))
def slow_retry(tag: str) -> str:
    """Fail once; the 2.5 s retry delay is above the 2 s countdown limit (a timer row)."""
    if _count(tag) == 1:
        raise ConnectionError("rate limited, come back later")
    return f"late:{tag}"


@xsm.task(
    shared=False, bind=True, retry_policy=RetryPolicy(max_attempts=3, base_ms=1500, jitter="none")
)
def held_retry(self: Any, tag: str) -> bool:
    """Fail once; the retry waits 1.5 s in the worker; report whether it came redelivered."""
    if _count(tag) == 1:
        raise ConnectionError("try again shortly")
    return bool((self.request.delivery_info or {}).get("redelivered"))


_breakers = CircuitBreakerRegistry(default={"failure_threshold": 2, "cooldown_ms": 60_000})


def opened_key(tag: str) -> str:
    """Redis list where the worker's ``circuit_opened`` receiver records each opening."""
    return f"xsm-test:opened:{tag}"


@circuit_opened.connect
def _record_opened(sender: str, event: Any, **_: Any) -> None:
    """Record the breaker name and reason the signal carried, from inside the worker."""
    if sender.startswith("upstream-"):
        tag = sender.removeprefix("upstream-")
        _redis.rpush(opened_key(tag), f"{sender}|{event.reason}|{type(event).__name__}")
        _redis.expire(opened_key(tag), 600)


@app.task(shared=False)
def guarded(tag: str) -> str:
    """Call a failing upstream through the registry's breaker ``upstream-<tag>``."""

    def upstream() -> None:
        raise ConnectionError("upstream down")

    try:
        _breakers.get(f"upstream-{tag}").call(upstream)
    except CircuitOpenError:
        return "refused"
    except ConnectionError:
        return "failed"
    return "ok"


@xsm.task(
    shared=False, time_limit=2, retry_policy=RetryPolicy(max_attempts=2, base_ms=20, jitter="none")
)
def overruns(tag: str, times: int) -> str:
    """Sleep past the 2 s hard time limit on the first ``times`` calls, then return at once."""
    if _count(tag) <= times:
        time.sleep(30)
    return f"in-time:{tag}"


def chart_headers_key(tag: str) -> str:
    """Redis list of the ``xsm_chart*`` headers each run under ``tag`` received, as JSON."""
    return f"xsm-test:chart-headers:{tag}"


@xsm.task(
    shared=False, bind=True, retry_policy=RetryPolicy(max_attempts=3, base_ms=20, jitter="none")
)
def records_headers(self: Any, tag: str, failures: int) -> str:
    """Record each run's chart headers, fail ``failures`` times naming ``tag``, then succeed."""
    chart = {k: v for k, v in (self.request.headers or {}).items() if k.startswith("xsm_chart")}
    _redis.rpush(chart_headers_key(tag), json.dumps(chart))
    _redis.expire(chart_headers_key(tag), 600)
    count = _count(tag)
    if count <= failures:
        raise ConnectionError(f"{tag} failure {count}")
    return f"ok:{tag}"
