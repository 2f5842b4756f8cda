"""Workflows on real worker and Beat processes: exactly-once steps, kills, timers, task steps.

Two set-ups cover both brokers and both SQL stores: Redis with a private PostgreSQL schema,
and RabbitMQ with a SQLite file. The test process reads instances straight from the store.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from celery import Celery

from tests import services
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for
from tests.celery.workflow_charts import order_machine
from tests.celery.workflow_support import private_schema
from xsm_celery.celery import Workflow, Xsm

pytestmark = pytest.mark.slow

APP = "tests.celery.workflow_workerapp"


def _with_db(url: str, db: int) -> str:
    return f"{url.rstrip('/').rsplit('/', 1)[0]}/{db}"


@pytest.fixture(scope="module", params=["redis+postgres", "rabbitmq+sqlite"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str]]:
    """A broker, a store, and the cluster env the workers need (no worker started yet)."""
    broker_kind, store_kind = request.param.split("+")
    services.require("redis")
    services.require(broker_kind)
    workdir: Path = tmp_path_factory.mktemp(f"wf-{broker_kind}")
    broker = (
        _with_db(services.REDIS_URL, BROKER_DB) if broker_kind == "redis" else services.RABBITMQ_URL
    )
    backend = _with_db(services.REDIS_URL, BACKEND_DB)
    if store_kind == "postgres":
        services.require("postgres")
        with private_schema(services.POSTGRES_URL) as store:
            yield _cluster(broker, backend, workdir, store), store
    else:
        store = f"sqlite:///{workdir / 'workflows.db'}"
        yield _cluster(broker, backend, workdir, store), store


def _cluster(broker: str, backend: str, workdir: Path, store: str) -> Cluster:
    env = {"XSM_TEST_WORKFLOW_STORE": store, "XSM_TEST_TAG": uuid.uuid4().hex[:8]}
    return Cluster(broker=broker, backend=backend, workdir=workdir, app=APP, extra_env=env)


@pytest.fixture
def cluster(setup: tuple[Cluster, str]) -> Iterator[Cluster]:
    """The module's cluster; every process a test started is stopped after it."""
    group = setup[0]
    try:
        yield group
    finally:
        for proc in list(group.procs):
            group.stop(proc, signal.SIGKILL)


@pytest.fixture
def producer(setup: tuple[Cluster, str]) -> Iterator[Celery]:
    """The test's side of the app: same workflows and store, no worker."""
    group, store = setup
    app = group.producer()
    app.conf.xsm_workflow_store = store
    app.conf.xsm_timer_countdown_max_s = 2.0
    yield app
    app.close()


def _workflows(app: Celery) -> dict[str, Workflow]:
    @app.task(name="wf_tests.charge", shared=False)
    def charge(amount: int) -> dict[str, int]:
        return {"charged": amount}

    xsm = Xsm(app)
    flows = {
        "orders": xsm.workflow(order_machine(charge), name="orders"),
        "short": xsm.workflow(order_machine(charge, timeout_ms=1_500), name="short"),
        "long": xsm.workflow(order_machine(charge, timeout_ms=4_000), name="long"),
    }
    flows["orders"].stores()
    return flows


def _value(flow: Workflow, key: str) -> Any:
    view = flow.get(key)
    return None if view is None else view.value


def test_two_workers_apply_200_events_over_20_keys_exactly_once(
    cluster: Cluster, producer: Celery
) -> None:
    """Every event lands once per key, duplicates of 20 event ids included."""
    flows = _workflows(producer)
    orders = flows["orders"]
    cluster.start_worker("a")
    cluster.start_worker("b")
    run = uuid.uuid4().hex[:6]
    keys = [f"{run}-{n}" for n in range(20)]
    for n in range(200):
        key = keys[n % 20]
        orders.send(key, "NOTE", event_id=f"{run}-e{n}")
        if n % 10 == 0:
            orders.send(key, "NOTE", event_id=f"{run}-e{n}")

    def total() -> int:
        views = [orders.get(k) for k in keys]
        return sum(v.context["events"] for v in views if v is not None)

    wait_for(lambda: total() >= 200, 120, "200 applied events")
    assert total() == 200
    for key in keys:
        view = orders.get(key)
        assert view is not None
        assert view.context["events"] == 10
        assert view.version == 10


def test_a_worker_killed_mid_step_applies_the_event_once(
    cluster: Cluster, producer: Celery
) -> None:
    """SIGKILL during a step rolls it back; the redelivered message applies it once."""
    orders = _workflows(producer)["orders"]
    started = redis_lib.Redis.from_url(cluster.backend)
    counter = f"xsm-test:wf-slow:{cluster.extra_env['XSM_TEST_TAG']}"
    started.delete(counter)
    worker = cluster.start_worker("victim", pool="solo")
    key = f"kill-{uuid.uuid4().hex[:6]}"
    orders.send(key, "SLOW", seconds=3.0)
    wait_for(lambda: started.get(counter) == b"1", 30, "the slow step to start")
    cluster.stop(worker, signal.SIGKILL)
    assert orders.get(key) is None
    cluster.start_worker("heir", pool="solo")
    wait_for(lambda: orders.get(key) is not None, 60, "the redelivered step to commit")
    view = orders.get(key)
    assert view is not None
    assert view.context["events"] == 1
    assert int(started.get(counter) or 0) == 2


def test_a_step_that_kills_its_worker_every_time_is_dead_lettered(
    cluster: Cluster, producer: Celery
) -> None:
    """Each lost run counts as a failure; the policy's two attempts end in one dead letter."""
    from xsm_celery.sqlalchemy import open_dead_letter_store

    orders = _workflows(producer)["orders"]
    client = redis_lib.Redis.from_url(cluster.backend)
    crashes = f"xsm-test:wf-crash:{cluster.extra_env['XSM_TEST_TAG']}"
    client.delete(crashes)
    cluster.start_worker("crash")
    key = f"crash-{uuid.uuid4().hex[:6]}"
    orders.send(key, "CRASH")
    store = open_dead_letter_store(cluster.dlq_url)
    [record] = wait_for(
        lambda: [r for r in store.list(limit=200) if r.task_args and r.task_args[0] == key],
        90,
        "the crashing step's dead letter",
    )
    assert record.reason == "worker_lost"
    assert record.attempts == 2
    assert [e["type"] for e in record.errors] == ["WorkerLost", "WorkerLost"]
    assert record.event == {"type": "CRASH", "payload": {}}
    time.sleep(2.0)
    assert int(client.get(crashes) or 0) == 2
    assert orders.get(key) is None
    assert len([r for r in store.list(limit=200) if r.task_args and r.task_args[0] == key]) == 1


def test_a_short_timer_fires_as_a_countdown_with_no_process_holding_it(
    cluster: Cluster, producer: Celery
) -> None:
    """The 1.5 s payment timeout expires the order through its countdown message."""
    short = _workflows(producer)["short"]
    cluster.start_worker("t")
    key = f"short-{uuid.uuid4().hex[:6]}"
    short.send(key, "NOTE")
    wait_for(lambda: _value(short, key) == "created", 30, "the instance to exist")
    wait_for(lambda: _value(short, key) == "expired", 30, "the countdown timer")


def test_a_long_timer_fires_through_beat(cluster: Cluster, producer: Celery) -> None:
    """The 4 s timeout is above the 2 s countdown limit: a row that Beat publishes when due."""
    long = _workflows(producer)["long"]
    cluster.start_worker("l")
    cluster.start_beat()
    key = f"long-{uuid.uuid4().hex[:6]}"
    long.send(key, "NOTE")
    wait_for(lambda: _value(long, key) == "created", 30, "the instance to exist")
    assert long.stores().timers.due(time.time() + 3600) != []
    wait_for(lambda: _value(long, key) == "expired", 40, "Beat to fire the timer")


def test_a_task_step_on_a_worker_completes_the_instance(cluster: Cluster, producer: Celery) -> None:
    """charge runs on the worker; its result and its failure come back as workflow events."""
    orders = _workflows(producer)["orders"]
    cluster.start_worker("c")
    good, bad = f"pay-{uuid.uuid4().hex[:6]}", f"decline-{uuid.uuid4().hex[:6]}"
    orders.send(good, "PAY", total=30)
    orders.send(bad, "PAY", total=-1)
    wait_for(lambda: _value(orders, good) == "paid", 60, "the charge result")
    wait_for(lambda: _value(orders, bad) == "failed", 60, "the charge failure")
    paid, failed = orders.get(good), orders.get(bad)
    assert paid is not None
    assert paid.context["receipt"] == {"charged": 30}
    assert failed is not None
    assert failed.context["error"] == "ValueError"


def _saga(app: Celery) -> Workflow:
    from tests.celery.workflow_workerapp import fulfil_machine

    return Xsm(app).workflow(fulfil_machine(), name="fulfil")


def _saga_runs(cluster: Cluster) -> tuple[redis_lib.Redis, str]:
    client = redis_lib.Redis.from_url(cluster.backend)
    return client, f"xsm-test:wf-saga:{cluster.extra_env['XSM_TEST_TAG']}"


def test_a_saga_compensates_in_reverse_across_a_worker_kill(
    cluster: Cluster, producer: Celery
) -> None:
    """ship fails; the worker dies during refund; refund re-runs once, then release, then failed."""
    fulfil = _saga(producer)
    client, prefix = _saga_runs(cluster)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    worker = cluster.start_worker("saga", pool="solo")
    order = f"saga-{uuid.uuid4().hex[:6]}"
    fulfil.send(order, "START", fail_ship=True, slow_refund=True)
    wait_for(lambda: client.get(f"{prefix}:refund_card") == b"1", 60, "the refund to start")
    cluster.stop(worker, signal.SIGKILL)
    cluster.start_worker("saga-heir", pool="solo")
    wait_for(lambda: _value(fulfil, order) == "failed", 90, "the saga to finish compensating")
    view = fulfil.get(order)
    assert view is not None
    assert view.context["compensated"] == ["charge", "reserve"]
    runs = [r.decode() for r in client.lrange(f"{prefix}:order", 0, -1)]
    assert runs == [
        "reserve_stock",
        "charge_card",
        "ship_parcel",
        "refund_card",
        "refund_card",
        "release_stock",
    ]


def test_a_stuck_compensation_is_a_dead_letter(cluster: Cluster, producer: Celery) -> None:
    """A refund that fails ends the saga in compensationFailed and writes its dead letter."""
    fulfil = _saga(producer)
    cluster.start_worker("stuck")
    order = f"stuck-{uuid.uuid4().hex[:6]}"
    fulfil.send(order, "START", fail_ship=True, fail_refund=True)
    wait_for(lambda: _value(fulfil, order) == "compensationFailed", 90, "compensationFailed")
    from xsm_celery.sqlalchemy import open_dead_letter_store

    store = open_dead_letter_store(cluster.dlq_url)
    records = wait_for(
        lambda: [r for r in store.list(limit=100) if r.topic == f"workflow:fulfil:{order}"],
        30,
        "the dead letter",
    )
    assert records[0].state_id == "fulfil.compensationFailed"
    assert records[0].reason == "dead_letter_state"
    assert "ConnectionError" in json.dumps(records[0].snapshot)
    # The failed compensation's own error and runs are in the record, not only the snapshot.
    assert records[0].attempts == 1
    assert [e["type"] for e in records[0].errors][-1] == "ServiceTaskFailed"
    assert "refund_card" in records[0].errors[-1]["message"]


def test_a_failing_step_is_retried_then_dead_lettered_and_replayed(
    cluster: Cluster, producer: Celery
) -> None:
    """Two attempts by the policy, a dead letter with the event and chain, a replay that works."""
    from xsm_celery.celery import replay_task
    from xsm_celery.sqlalchemy import open_dead_letter_store

    orders = _workflows(producer)["orders"]
    client = redis_lib.Redis.from_url(cluster.backend)
    broken = f"xsm-test:wf-broken:{cluster.extra_env['XSM_TEST_TAG']}"
    client.set(broken, 1)
    cluster.start_worker("boom")
    key = f"boom-{uuid.uuid4().hex[:6]}"
    orders.send(key, "BOOM", note="n1")
    store = open_dead_letter_store(cluster.dlq_url)
    [record] = wait_for(
        lambda: [r for r in store.list(limit=200) if r.task_args and r.task_args[0] == key],
        60,
        "the step's dead letter",
    )
    assert record.task_name == "xsm.workflow.orders"
    assert record.reason == "task_exhausted"
    assert record.attempts == 2
    assert record.event == {"type": "BOOM", "payload": {"note": "n1"}}
    assert [e["type"] for e in record.errors] == ["RuntimeError", "RuntimeError"]
    assert "warehouse API is down" in record.errors[-1]["message"]
    assert orders.get(key) is None
    client.delete(broken)
    result = replay_task(store, record.id, producer, reason="warehouse is back", dry_run=False)
    assert result.outcome.startswith("sent xsm.workflow.orders")
    wait_for(lambda: orders.get(key) is not None, 60, "the replayed step")
    view = orders.get(key)
    assert view is not None
    assert view.context["events"] == 1


def test_a_chart_task_step_reports_only_when_it_gives_up(
    cluster: Cluster, producer: Celery
) -> None:
    """Two attempts by its own policy, one error event; its dead letter names workflow and key."""
    from xsm_celery.sqlalchemy import open_dead_letter_store

    chartpay = Xsm(producer).workflow(order_machine("wf_tests.chart_charge"), name="chartpay")
    client = redis_lib.Redis.from_url(cluster.backend)
    runs = f"xsm-test:wf-chart:{cluster.extra_env['XSM_TEST_TAG']}"
    client.delete(runs)
    cluster.start_worker("chart")
    key = f"chart-{uuid.uuid4().hex[:6]}"
    chartpay.send(key, "PAY", total=-5)
    wait_for(lambda: _value(chartpay, key) == "failed", 60, "the chart task to give up")
    assert int(client.get(runs) or 0) == 2
    view = chartpay.get(key)
    assert view is not None
    assert view.context["error"] == "ValueError"
    store = open_dead_letter_store(cluster.dlq_url)
    [letter] = wait_for(
        lambda: [
            r
            for r in store.list(limit=200)
            if r.task_name == "wf_tests.chart_charge"
            and r.event.get("payload", {}).get("key") == key
        ],
        30,
        "the chart task's dead letter",
    )
    payload = letter.event["payload"]
    assert (payload["workflow"], payload["key"]) == ("chartpay", key)
    # The step's completion callback is kept, so a replay still reports to the instance.
    assert payload["canvas"]["callbacks"][0]["args"][0] == key
    assert letter.attempts == 2
