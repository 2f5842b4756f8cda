"""The Celery app of the scrape-truth test: ``workerapp`` plus a fleet breaker, a fleet bucket,
workflows with timers of both lengths, a failing workflow step and a saga whose compensation
fails.

Configured from the environment like ``workerapp`` (which it imports and extends), plus
``XSM_TEST_FLEET_PREFIX`` (the fleet keys of this test only) and ``XSM_TEST_WORKFLOW_STORE``
(the test points it at the durable timer store's file, so workflow timer rows share the
table chart-task retries use, as with ``"django"`` for both).
"""

from __future__ import annotations

import os
from typing import Any

from tests.celery.workflow_charts import order_machine
from tests.metrics.workerapp import app, calls, xsm
from xsm_celery.celery import celery_service
from xsm_celery.celery.fleet.plan import RateLimit
from xsm_celery.engine import MachineLogic, create_machine
from xsm_celery.patterns import RetryPolicy, SagaBuilder

#: The fleet breaker: opens at the first failure, probes again after one second.
BREAKER = "truth-psp"
BREAKER_OPTIONS = {"failure_threshold": 1, "cooldown_ms": 1_000}

app.conf.update(
    xsm_redis_url=app.conf.result_backend,
    xsm_fleet_prefix=os.environ.get("XSM_TEST_FLEET_PREFIX", "xsm-test-truth:"),
    xsm_breakers={BREAKER: BREAKER_OPTIONS},
)
STORE = os.environ.get("XSM_TEST_WORKFLOW_STORE", "sqlite:///xsm_truth_workflows.db")


@xsm.task(name="truth.guarded", breaker=BREAKER, retry_policy=RetryPolicy(max_attempts=1))
def guarded(fail: bool) -> str:
    """A call through the fleet breaker: a failure opens it, a success after the cooldown closes it."""
    if fail:
        raise ConnectionError("the payment provider is down")
    return "paid"


@xsm.task(name="truth.rated", fleet_rate_limit=RateLimit("5/s", burst=5, key="truth-rate"))
def rated(n: int) -> int:
    """Spends one token of a 5/s fleet bucket."""
    return n


@app.task(name="truth.charge")
def charge(amount: int) -> dict[str, int]:
    """The order chart's payment step."""
    return {"charged": amount}


#: Its payment timer (0.2 s) travels as a countdown message.
quick = xsm.workflow(order_machine(charge, timeout_ms=200), name="truth_quick", store=STORE)
#: Its payment timer (1.5 s, above xsm_timer_countdown_max_s) is a durable row Beat fires.
patient = xsm.workflow(order_machine(charge, timeout_ms=1_500), name="truth_patient", store=STORE)
#: BOOM's action raises: one retry of the step, then a workflow dead letter.
brittle = xsm.workflow(
    order_machine(charge, chart_id="brittle"),
    name="truth_brittle",
    store=STORE,
    retry_policy=RetryPolicy(max_attempts=2, base_ms=50, jitter="none"),
)


@app.task(name="truth.reserve")
def reserve(order: dict[str, Any]) -> str:
    """Saga step 1: quick, so its 400 ms timeout message arrives after the step is done."""
    calls(f"{order['tag']}:reserve")
    return "reserved"


@app.task(name="truth.release")
def release(order: dict[str, Any]) -> str:
    """Compensation of step 1: refuses, so the saga ends in compensationFailed."""
    raise ConnectionError("the warehouse refuses releases today")


@app.task(name="truth.ship")
def ship(order: dict[str, Any]) -> str:
    """Saga step 2: no courier."""
    raise RuntimeError("no courier available")


def _saga() -> Any:
    saga = (
        SagaBuilder("truthsaga", start_event="START")
        .step("reserve", invoke="reserve", compensate="release", timeout_ms=400)
        .step("ship", invoke="ship")
    )

    def order(ctx: dict[str, Any], event: Any) -> list[Any]:
        return [ctx.get("input") or {}]

    tasks = {"reserve": reserve, "release": release, "ship": ship}
    services = {name: celery_service(task, args=order) for name, task in tasks.items()}
    return create_machine(saga.build(), logic=saga.logic().merge(MachineLogic(services=services)))


saga = xsm.workflow(_saga(), name="truth_saga", store=STORE)
