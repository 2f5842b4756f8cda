"""A scripted run on a real prefork worker, then a real scrape checked against what happened.

Chart-task retries and a give-up, a durable retry fired by the Beat task, a fleet breaker
opened and closed again, a fleet bucket spent, workflow timers of both lengths (a countdown
and a durable row that shares the chart tasks' timer table), a failing workflow step and a
saga whose compensation fails. "What happened" is read from the stores, Redis and the
worker's log, never from the metrics themselves: every sample must match it exactly.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tests import services
from tests.celery.workers import wait_for
from tests.metrics.test_worker import Worker, value
from xsm_celery.celery.workflow.messages import Message
from xsm_celery.celery.workflow.stores import open_workflow_stores
from xsm_celery.persistence.opening import open_store
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore

pytestmark = [pytest.mark.slow, pytest.mark.service, pytest.mark.timeout(240)]

APP = "tests.metrics.truthapp"
BREAKER = "truth-psp"

#: The metrics whose every label must be filled.
_OWN_METRICS = re.compile(
    r"^(xsm_(task|dead_letter|timer|workflow|breaker|limit)\w*)\{(.*)\}", re.M
)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A prefork worker of the truth app, its workflows in the timer store's file."""
    services.require("redis")
    workdir = tmp_path_factory.mktemp("truth-worker")
    prefix = f"xsm-test-truth-{uuid.uuid4().hex[:8]}:"
    group = Worker(workdir, app=APP, env={"XSM_TEST_FLEET_PREFIX": prefix})
    group.extra_env["XSM_TEST_WORKFLOW_STORE"] = group.cluster.timers_url
    group.start()
    try:
        yield group
    finally:
        group.close()


def _send(app: Celery, workflow: str, key: str, event: str, **payload: Any) -> None:
    message = Message(uuid.uuid4().hex, "event", type=event, payload=payload)
    app.send_task(f"xsm.workflow.{workflow}", args=[key, message.to_dict()])


def _state(stores: Any, workflow: str, key: str) -> str | None:
    record = stores.snapshots.load(f"{workflow}:{key}")
    if record is None:
        return None
    ids = json.loads(record.snapshot).get("state_ids") or []
    return ",".join(sorted(str(i).split(".", 1)[-1] for i in ids))


def _fire_until(app: Celery, check: Any, what: str, timeout: float = 30) -> None:
    """Send the Beat task every half second until ``check`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        app.send_task("xsm_celery.fire_timers")
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


def test_every_sample_of_the_scrape_is_what_happened(worker: Worker) -> None:
    """Counters, labels and gauges after the scripted run match the stores, Redis and log."""
    app = worker.producer()
    timers = SQLAlchemyTimerStore(worker.cluster.timers_url)
    dead_letters = open_store(worker.cluster.dlq_url, "dead_letters", setting="test")
    workflows = open_workflow_stores(worker.cluster.timers_url)
    tag = uuid.uuid4().hex[:8]
    try:
        # Chart tasks: two retries then success, a give-up, a durable retry Beat fires.
        assert app.send_task("obs.flaky", args=(f"{tag}-f", 2)).get(timeout=60) == "ok"
        with pytest.raises(Exception, match="refused"):
            app.send_task("obs.doomed", args=("x",)).get(timeout=60)
        slow = app.send_task("obs.slow", args=(f"{tag}-s",))
        wait_for(lambda: timers.count() == 1, 30, "the durable retry row")
        time.sleep(1.0)
        app.send_task("xsm_celery.fire_timers")
        assert slow.get(timeout=60) == "late"

        # The fleet breaker opens; the scrape reads it open from Redis.
        with pytest.raises(Exception, match="down"):
            app.send_task("truth.guarded", args=(True,)).get(timeout=60)
        opened = worker.scrape()
        assert value(opened, "xsm_breaker_state", breaker=BREAKER, scope="fleet") == 2
        # After the cooldown a successful probe closes it.
        time.sleep(1.2)
        assert app.send_task("truth.guarded", args=(False,)).get(timeout=60) == "paid"

        # Three calls spend three tokens of the 5/s fleet bucket.
        assert [app.send_task("truth.rated", args=(n,)).get(timeout=60) for n in range(3)] == [
            0,
            1,
            2,
        ]
        spent = worker.scrape()

        # Workflows: a countdown timer, a durable timer row, a failing step, a saga.
        _send(app, "truth_quick", "q1", "NOTE")
        _send(app, "truth_patient", "p1", "NOTE")
        _send(app, "truth_brittle", "b1", "BOOM")
        _send(app, "truth_saga", "s1", "START", tag=tag)
        wait_for(lambda: _state(workflows, "truth_quick", "q1") == "expired", 30, "q1 expired")
        _fire_until(
            app, lambda: _state(workflows, "truth_patient", "p1") == "expired", "p1 expired"
        )
        saga_letters = lambda: [  # noqa: E731
            r for r in dead_letters.list(limit=100) if r.topic == "workflow:truth_saga:s1"
        ]
        wait_for(saga_letters, 60, "the saga's compensationFailed dead letter")
        wait_for(
            lambda: [
                r for r in dead_letters.list(limit=100) if r.topic == "workflow:truth_brittle:b1"
            ],
            60,
            "the failing step's dead letter",
        )
        time.sleep(1.5)  # the saga step's 400 ms timer message arrives after the step settled
        pending = timers.count()
        samples = worker.scrape()
        log = worker.cluster.log("w1")
    finally:
        app.close()

    # Chart tasks, exactly.
    assert (
        value(samples, "xsm_task_retries_total", task="obs.flaky", exception="ConnectionError") == 2
    )
    assert value(samples, "xsm_task_attempts_total", task="obs.flaky", outcome="retry") == 2
    assert value(samples, "xsm_task_attempts_total", task="obs.flaky", outcome="succeeded") == 1
    assert value(samples, "xsm_task_attempts_total", task="obs.doomed", outcome="gave_up") == 1

    # Dead letters of every kind: the counters are the store's records, by source and reason.
    records = dead_letters.list(limit=100)
    stored = Counter(
        ("workflow" if (r.topic or "").startswith("workflow:") else "task", r.reason)
        for r in records
    )
    counted = Counter(
        {
            (dict(labels)["source"], dict(labels)["reason"]): int(v)
            for (name, labels), v in samples.items()
            if name == "xsm_dead_letters_total"
        }
    )
    assert counted == stored
    assert {source for source, _ in stored} == {"task", "workflow"}
    assert sum(n for (source, _), n in stored.items() if source == "workflow") == 2
    assert [r.state_id for r in saga_letters()] == ["truthsaga.compensationFailed"]
    for reason, n in Counter(r.reason for r in records).items():
        assert value(samples, "xsm_dead_letters_recent", window="1h", reason=reason) == n

    # The failing step: its exception and what became of it, once each.
    errors = "xsm_workflow_step_errors_total"
    brittle = {"workflow": "truth_brittle", "exception": "RuntimeError"}
    assert value(samples, errors, **brittle, outcome="retry") == 1
    assert value(samples, errors, **brittle, outcome="dead_letter") == 1

    # Transitions name the state entered.
    transitions = "xsm_workflow_transitions_total"
    assert value(samples, transitions, workflow="truth_quick", state="expired") == 1
    assert value(samples, transitions, workflow="truth_patient", state="expired") == 1
    assert value(samples, transitions, workflow="truth_saga", state="compensationFailed") == 1

    # Stale messages: a timer of a settled saga step is not a stale completion.
    stale = Counter(re.findall(r"workflow (\w+)\[\w+\]: stale (\w+) message", log))
    # The reserve step finished before its 400 ms timeout (it was compensated), so the
    # timeout's message arrived for a timer already cancelled.
    assert stale[("truth_saga", "timer")] == 1, stale
    assert value(samples, "xsm_workflow_stale_timers_total", workflow="truth_saga") == 1
    late = sum(n for (name, kind), n in stale.items() if kind in ("done", "error"))
    assert late == 0, stale
    assert value(samples, "xsm_workflow_stale_completions_total", workflow="truth_saga") is None

    # Timers by purpose: one durable retry; the workflows' own timers; no recovery, since
    # no message was lost (the durable workflow row fired by Beat is not a retry).
    assert value(samples, "xsm_timers_scheduled_total", purpose="retry") == 1
    assert value(samples, "xsm_timers_fired_total", purpose="retry") == 1
    # Armed: q1's and p1's payment timers and the saga's reserve timeout (b1's step rolled
    # back); fired: q1's and p1's.
    assert value(samples, "xsm_timers_scheduled_total", purpose="workflow") == 3
    assert value(samples, "xsm_timers_fired_total", purpose="workflow") == 2
    for purpose in ("workflow_timer", "workflow_task_step", "machine", "unknown"):
        assert value(samples, "xsm_timers_fired_total", purpose=purpose) is None, purpose
    assert value(samples, "xsm_timers_pending") == pending

    # The breaker: opened once, probed once, closed; the gauge reads closed from Redis.
    for state in ("open", "half_open", "closed"):
        assert (
            value(
                samples,
                "xsm_breaker_transitions_total",
                breaker=BREAKER,
                scope="fleet",
                state=state,
            )
            == 1
        ), state
    assert value(samples, "xsm_breaker_state", breaker=BREAKER, scope="fleet") == 0
    assert value(samples, "xsm_store_up", store="fleet") == 1

    # The bucket: three admissions; tokens read in range then, full (5) seconds later.
    [limit] = [
        dict(labels)["limit"]
        for (name, labels), _ in spent.items()
        if name == "xsm_limit_admissions_total" and "truth-rate" in dict(labels)["limit"]
    ]
    assert value(spent, "xsm_limit_admissions_total", limit=limit) == 3
    tokens = value(spent, "xsm_limit_tokens", limit=limit)
    assert tokens is not None
    assert 2 <= tokens <= 5
    assert value(spent, "xsm_limit_reserved_tokens", limit=limit) == 0
    assert value(samples, "xsm_limit_tokens", limit=limit) == 5

    # No label of the package's own metrics is empty.
    text = worker.scrape_text()
    for metric, labels in ((m.group(1), m.group(3)) for m in _OWN_METRICS.finditer(text)):
        assert '=""' not in labels, (metric, labels)
