"""A chart retry looks like any Celery retry: RETRY state, task_retry signal, task-retried event."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from tests import services
from tests.celery.conftest import _with_db
from tests.celery.test_worker_processes import TASKS, retries
from tests.celery.workerapp import tracebacks_key
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def events_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Redis broker and backend with one prefork worker that sends task events (``-E``)."""
    services.require("redis")
    group = Cluster(
        broker=_with_db(services.REDIS_URL, BROKER_DB),
        backend=_with_db(services.REDIS_URL, BACKEND_DB),
        workdir=Path(tmp_path_factory.mktemp("cluster-events")),
    )
    import os

    os.environ["XSM_TEST_TASK_EVENTS"] = "1"
    try:
        group.start_worker("events")
    finally:
        del os.environ["XSM_TEST_TASK_EVENTS"]
    try:
        yield group
    finally:
        group.close()


def test_a_chart_retry_is_visible_as_a_celery_retry(events_cluster: Cluster) -> None:
    """Fail once then succeed: one task-retried event, one task_retry signal, then SUCCESS."""
    app = events_cluster.producer()
    seen: dict[str, list[dict[str, Any]]] = {"task-retried": [], "task-succeeded": []}
    ready = threading.Event()
    stop = threading.Event()

    def listen() -> None:
        with app.connection_for_read() as conn:
            receiver = app.events.Receiver(
                conn, handlers={kind: seen[kind].append for kind in seen}
            )
            with receiver.consumer_context() as (consuming, _, _):
                ready.set()
                while not stop.is_set():
                    try:
                        consuming.drain_events(timeout=0.5)
                    except TimeoutError:
                        continue

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert ready.wait(10)
    tag = uuid.uuid4().hex
    result = app.send_task(f"{TASKS}.jittered", args=(tag, 1))
    try:
        assert result.get(timeout=30) == f"ok:{tag}"
        wait_for(
            lambda: any(e["uuid"] == result.id for e in seen["task-succeeded"]),
            15,
            "the task-succeeded event",
        )
    finally:
        stop.set()
        listener.join(timeout=5)
    retried = [e for e in seen["task-retried"] if e["uuid"] == result.id]
    assert len(retried) == 1
    assert "ConnectionError" in retried[0]["exception"]
    results_redis = redis_lib.Redis.from_url(events_cluster.backend)
    signals = retries(results_redis, result.id)
    assert [(task_id, cause) for task_id, _, cause in signals] == [(result.id, "ConnectionError")]
    # The prefork child's tracer was rebuilt: the retry's text is its own line, no frames.
    line = r"xsm_celery\.celery\.task\.tracer\.ChartRetry: Retry in [0-9.e-]+s: ConnectionError\('upstream"
    [signalled] = results_redis.lrange(tracebacks_key(result.id), 0, -1)
    assert re.fullmatch(rf"{line} 503 for {tag}'\)\n", signalled.decode())
    assert retried[0]["traceback"] == signalled.decode()


def test_a_waiting_chart_retry_is_in_the_retry_state_with_its_cause(
    events_cluster: Cluster,
) -> None:
    """Between the failure and its retry the backend says RETRY, with the cause as result."""
    app = events_cluster.producer()
    tag = uuid.uuid4().hex
    result = app.send_task(f"{TASKS}.retried_later", args=(tag,))
    wait_for(lambda: result.state == "RETRY", 10, "the RETRY state")
    assert isinstance(result.result, ConnectionError)
    assert str(result.result) == f"upstream 503 for {tag}"
    assert result.traceback.startswith("xsm_celery.celery.task.tracer.ChartRetry: Retry in 1.5s: ")
    assert result.get(timeout=20) == f"ok:{tag}"
