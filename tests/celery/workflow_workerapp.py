"""The Celery app the workflow tests' real worker and Beat processes run.

Configured from the environment by ``tests/celery/test_workflow_workers.py``: broker, queue,
the workflow store (a private PostgreSQL schema or a SQLite file) and a Redis database where
the slow action counts its starts, so the test sees a step that ran but never committed.
"""

from __future__ import annotations

import os
import signal
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


def broken_key() -> str:
    """While this Redis key exists, BOOM's action raises."""
    return f"xsm-test:wf-broken:{TAG}"


def explode(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Fail while the warehouse is flagged broken; count the event once it is back."""
    if _redis.exists(broken_key()):
        raise RuntimeError("the warehouse API is down")
    ctx["events"] += 1


def crashes_key() -> str:
    """Redis counter of the crashing action's starts."""
    return f"xsm-test:wf-crash:{TAG}"


def crash(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Kill this pool process, as a native crash or the OOM killer would, every time."""
    _redis.incr(crashes_key())
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(name="wf_tests.charge", acks_late=True)
def charge(amount: int) -> dict[str, int]:
    """The payment step: a negative amount is declined."""
    if amount < 0:
        raise ValueError(f"declined amount {amount}")
    return {"charged": amount}


policy = RetryPolicy(max_attempts=2, base_ms=50)
orders = xsm.workflow(
    order_machine(charge, slow=slow, explode=explode, crash=crash),
    name="orders",
    retry_policy=policy,
)
short = xsm.workflow(order_machine(charge, timeout_ms=1_500), name="short")
long = xsm.workflow(order_machine(charge, timeout_ms=4_000), name="long")


def runs_key(task: str) -> str:
    """Redis counter of the runs (started) of one saga task."""
    return f"xsm-test:wf-saga:{TAG}:{task}"


def _ran(task: str, order: dict[str, Any]) -> None:
    # The order first: a test that waits for the counter then kills the worker must find
    # the run in the order list too.
    _redis.rpush(f"xsm-test:wf-saga:{TAG}:order", task)
    _redis.incr(runs_key(task))


@app.task(name="wf_tests.reserve_stock", acks_late=True, reject_on_worker_lost=True)
def reserve_stock(order: dict[str, Any]) -> str:
    """Saga step 1."""
    _ran("reserve_stock", order)
    return "reserved"


@app.task(name="wf_tests.release_stock", acks_late=True, reject_on_worker_lost=True)
def release_stock(order: dict[str, Any]) -> str:
    """Compensation of step 1."""
    _ran("release_stock", order)
    return "released"


@app.task(name="wf_tests.charge_card", acks_late=True, reject_on_worker_lost=True)
def charge_card(order: dict[str, Any]) -> str:
    """Saga step 2."""
    _ran("charge_card", order)
    return "charged"


@app.task(name="wf_tests.refund_card", acks_late=True, reject_on_worker_lost=True)
def refund_card(order: dict[str, Any]) -> str:
    """Compensation of step 2: slow on its first run when asked (the test kills it then)."""
    _ran("refund_card", order)
    if order.get("slow_refund") and int(_redis.get(runs_key("refund_card")) or 0) == 1:
        time.sleep(4.0)
    if order.get("fail_refund"):
        raise ConnectionError("the card processor refuses refunds today")
    return "refunded"


@app.task(name="wf_tests.ship_parcel", acks_late=True, reject_on_worker_lost=True)
def ship_parcel(order: dict[str, Any]) -> str:
    """Saga step 3: fails when the order says so."""
    _ran("ship_parcel", order)
    if order.get("fail_ship"):
        raise RuntimeError("no courier available")
    return "shipped"


def fulfil_machine() -> Any:
    """The fulfilment saga (reserve -> charge -> ship) with every step a task on a worker."""
    from xsm_celery.celery import celery_service
    from xsm_celery.engine import MachineLogic, create_machine
    from xsm_celery.patterns import SagaBuilder

    saga = (
        SagaBuilder("fulfil", start_event="START")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", compensate="refundCard")
        .step("ship", invoke="shipParcel")
    )

    def order(ctx: dict[str, Any], event: Any) -> list[Any]:
        return [ctx.get("input") or {}]

    tasks = {
        "reserveStock": reserve_stock,
        "releaseStock": release_stock,
        "chargeCard": charge_card,
        "refundCard": refund_card,
        "shipParcel": ship_parcel,
    }
    services = {name: celery_service(task, args=order) for name, task in tasks.items()}
    return create_machine(saga.build(), logic=saga.logic().merge(MachineLogic(services=services)))


fulfil = xsm.workflow(fulfil_machine(), name="fulfil")


@xsm.task(name="wf_tests.chart_charge", retry_policy=RetryPolicy(max_attempts=2, base_ms=20))
def chart_charge(amount: int) -> dict[str, int]:
    """A ChartTask step: retried by its own policy, reported to the workflow once it gives up."""
    _redis.incr(f"xsm-test:wf-chart:{TAG}")
    if amount < 0:
        raise ValueError(f"declined amount {amount}")
    return {"charged": amount}


chartpay = xsm.workflow(order_machine(chart_charge), name="chartpay")
