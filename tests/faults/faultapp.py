"""The Celery app the fault tests' worker and Beat processes run (``-A tests.faults.faultapp``).

Configured from the environment the ``Cluster`` helper sets (``tests/celery/workers.py``):

* ``XSM_TEST_BROKER`` / ``XSM_TEST_BACKEND``: the private Redis, databases 0 and 1;
* ``XSM_TEST_QUEUE``: this module's queue; ``XSM_TEST_DLQ``, ``XSM_TEST_TIMERS``: SQLite
  files in the work directory;
* ``FAULT_STORE``: the workflow store, the private PostgreSQL;
* ``FAULT_MARKERS``: ``xsm_attempt_markers`` (the private Redis; ``memory://`` is refused
  on real workers);
* ``FAULT_COUNTERS``: a Redis database where actions and tasks count their runs, so a test
  sees runs that never committed;
* ``FAULT_GRACE``: ``xsm_workflow_recovery_grace_s`` (default 2).

``declare(app)`` registers the workflows and the task step on any app: the worker's here,
and the test's producer, which reads instances straight from the store.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any

import redis
from celery import Celery

from xsm_celery.celery import Workflow, Xsm, celery_service
from xsm_celery.engine import Machine, MachineLogic, create_machine
from xsm_celery.patterns import RetryPolicy

#: The task step's ``timeout_s``: a task step lost with the broker is sent again this soon.
TASK_STEP_TIMEOUT_S = 3.0

#: The ``after`` timer of state ``waiting``, in ms (a countdown message: below 300 s).
TIMER_MS = 10_000

#: The card number the secret test puts in an event; it must never be written anywhere.
CARD = "4111111111111111"

FAULT_CHART: dict[str, Any] = {
    "id": "fault",
    "initial": "idle",
    "context": {
        "notes": 0,
        "slow": 0,
        "fired_at": None,
        "receipt": None,
        "done": 0,
        "error": None,
        "amount": 0,
        "sleep_s": 0,
    },
    "on": {"NOTE": {"actions": "count"}},
    "states": {
        "idle": {
            "on": {
                "BOOM": {"actions": "boom"},
                "SLOW": {"actions": "slow"},
                "DECLINE": {"actions": "decline"},
                "WAIT": "waiting",
                "PAY": {"target": "charging", "actions": "remember"},
            }
        },
        "waiting": {"after": {TIMER_MS: {"target": "timedOut", "actions": "record_fire"}}},
        "timedOut": {},
        "charging": {
            "invoke": {
                "id": "charge",
                "src": "charge",
                "onDone": {"target": "paid", "actions": "keep_receipt"},
                "onError": {"target": "failed", "actions": "keep_error"},
            }
        },
        "paid": {},
        "failed": {},
    },
}

_clients: dict[str, redis.Redis] = {}


def counters() -> redis.Redis:
    """The Redis client of the run counters (one per process)."""
    url = os.environ.get("FAULT_COUNTERS", "redis://127.0.0.1:6379/15")
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


def runs_key(kind: str, key: str) -> str:
    """The Redis counter of ``kind`` runs (boom, slow, charge, decline) of instance ``key``."""
    return f"fault:{kind}:{key}"


def count(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """NOTE: one more applied event."""
    ctx["notes"] += 1


def boom(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """BOOM: count the run, then fail, every time."""
    counters().incr(runs_key("boom", ctx["key"]))
    raise RuntimeError("the warehouse API is down")


def slow(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """SLOW: count the start, then hold the step (and the key's lock) for ``seconds``."""
    counters().incr(runs_key("slow", ctx["key"]))
    time.sleep(float(event.payload.get("seconds", 1.0)))
    ctx["slow"] += 1


def decline(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """DECLINE: fail with the card number in the message, every time."""
    counters().incr(runs_key("decline", ctx["key"]))
    raise ValueError(f"card {event.payload['card_number']} declined")


def record_fire(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """The 10 s timer fired: when, by this worker's clock."""
    ctx["fired_at"] = time.time()


def remember(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """PAY: the amount and how long the charge task sleeps."""
    ctx["amount"] = event.payload.get("amount", 0)
    ctx["sleep_s"] = event.payload.get("sleep_s", 0)


def keep_receipt(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """The charge task's return value, and how many completions were applied."""
    ctx["receipt"] = event.data
    ctx["done"] += 1


def keep_error(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """The charge task's failure."""
    ctx["error"] = getattr(event.data, "error_type", repr(event.data))


def charge(key: str, amount: int, sleep_s: float) -> dict[str, Any]:
    """The task step: count the run, sleep ``sleep_s``, return the receipt."""
    counters().incr(runs_key("charge", key))
    time.sleep(float(sleep_s))
    return {"charged": amount, "key": key}


def fault_machine(charge_task: Any) -> Machine:
    """The fault chart with ``charge_task`` as its task step (``timeout_s`` 3 s)."""
    chart = copy.deepcopy(FAULT_CHART)
    return create_machine(
        chart,
        logic=MachineLogic(
            actions={
                "count": count,
                "boom": boom,
                "slow": slow,
                "decline": decline,
                "record_fire": record_fire,
                "remember": remember,
                "keep_receipt": keep_receipt,
                "keep_error": keep_error,
            },
            services={
                "charge": celery_service(
                    charge_task,
                    args=lambda ctx, e: [ctx["key"], ctx["amount"], ctx["sleep_s"]],
                    timeout_s=TASK_STEP_TIMEOUT_S,
                )
            },
        ),
    )


#: The fast policy of most tests: five runs, 100 ms apart then doubling, no jitter.
FAST = RetryPolicy(max_attempts=5, base_ms=100, jitter="none")


def declare(app: Celery) -> dict[str, Workflow]:
    """Register the task step and the workflows on ``app``.

    ``fault`` retries by ``FAST``; ``faultdefault`` keeps the default policy
    (``RetryPolicy(max_attempts=5, base_ms=500)``).
    """
    task = app.task(name="fault.charge", acks_late=True, shared=False)(charge)
    xsm = Xsm(app)
    return {
        "fault": xsm.workflow(fault_machine(task), name="fault", retry_policy=FAST),
        "faultdefault": xsm.workflow(fault_machine(task), name="faultdefault"),
    }


def configure(app: Celery) -> None:
    """The worker's settings, from the environment."""
    app.conf.update(
        broker_url=os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13"),
        result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
        task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-faults"),
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        result_expires=600,
        xsm_dead_letter_store=os.environ.get("XSM_TEST_DLQ", "sqlite:///dead_letters.db"),
        xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///timers.db"),
        xsm_workflow_store=os.environ.get("FAULT_STORE", "sqlite:///workflows.db"),
        xsm_attempt_markers=os.environ.get("FAULT_MARKERS") or None,
        xsm_dead_letter_spool=os.environ.get("FAULT_SPOOL", "spool"),
        xsm_timer_countdown_max_s=300,
        xsm_workflow_recovery_grace_s=float(os.environ.get("FAULT_GRACE", "2")),
    )


app = Celery("xsm_fault_tests")
configure(app)
workflows = declare(app)
xsm = Xsm(app)
app.conf.beat_schedule = xsm.beat_schedule(timers_every=1)
