"""Chart tasks on pytest-celery's in-process session worker (memory broker): fast checks.

The worker runs in a thread of the test process for the whole session; the tasks are
class-based ``ChartTask`` subclasses registered through ``celery_class_tasks``.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.signals import task_retry

from xsm_celery.celery import HEADER, ChartTask
from xsm_celery.celery.task.header import TASK_HEADER
from xsm_celery.patterns import RetryPolicy
from xsm_celery.sqlalchemy.urls import open_dead_letter_store

pytestmark = pytest.mark.timeout(60)

CALLS: defaultdict[str, list[tuple[str, Any]]] = defaultdict(list)


class Flaky(ChartTask):
    """Fails twice per tag, then returns n + 1; records the header it was given."""

    name = "inprocess.flaky"
    retry_policy = RetryPolicy(base_ms=10, jitter="none")

    def run(self, tag: str, n: int) -> int:
        CALLS[tag].append((self.request.id, (self.request.headers or {}).get(HEADER)))
        if len(CALLS[tag]) <= 2:
            raise ConnectionError("not yet")
        return n + 1


class Broken(ChartTask):
    """Always times out."""

    name = "inprocess.broken"
    retry_policy = RetryPolicy(max_attempts=2, base_ms=5)

    def run(self) -> None:
        raise TimeoutError("upstream timed out")


class Doomed(ChartTask):
    """Always fails; counts its runs per tag, so a forged header's effect is visible."""

    name = "inprocess.doomed"
    retry_policy = RetryPolicy(max_attempts=3, base_ms=1, jitter="none")

    def run(self, tag: str) -> None:
        CALLS[tag].append((self.request.id, None))
        raise ConnectionError("payment gateway down")


@pytest.fixture(scope="session")
def celery_config() -> dict[str, Any]:
    """The in-process app: memory broker polled often, in-memory results and dead letters.

    The memory transport is shared by the whole test process, so the session worker gets a
    queue of its own and never takes messages meant for other tests.
    """
    return {
        "broker_url": "memory://",
        "broker_transport_options": {"polling_interval": 0.01},
        "task_default_queue": "xsm-in-process",
        "result_backend": "cache+memory://",
        "xsm_dead_letter_store": "memory://in-process",
        "xsm_timer_store": "sqlite://",
    }


@pytest.fixture(scope="session")
def celery_class_tasks() -> list[type[ChartTask]]:
    """The chart tasks the session worker knows."""
    return [Flaky, Broken, Doomed]


@pytest.fixture
def retried() -> Iterator[list[tuple[str, Any]]]:
    """Every retry the worker reports through Celery's task_retry signal."""
    seen: list[tuple[str, Any]] = []

    def record(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
        seen.append((request.id, reason.when))

    task_retry.connect(record, weak=False)
    try:
        yield seen
    finally:
        task_retry.disconnect(record)


def test_retries_keep_the_task_id_and_carry_the_snapshot(
    celery_session_app: Celery, celery_session_worker: Any, retried: list[tuple[str, Any]]
) -> None:
    """Two failures, two RETRYs with 10 ms and 20 ms countdowns, then SUCCESS under one id."""
    result = celery_session_app.send_task("inprocess.flaky", args=("a", 41))
    assert result.get(timeout=20, interval=0.01) == 42
    assert [when for _, when in retried] == [0.01, 0.02]
    calls = CALLS["a"]
    assert {task_id for task_id, _ in calls} == {result.id}
    assert calls[0][1] is None
    assert '"attempt":2' in calls[2][1].replace(" ", "")


def test_exhaustion_on_the_in_process_worker_writes_a_dead_letter(
    celery_session_app: Celery, celery_session_worker: Any, retried: list[tuple[str, Any]]
) -> None:
    """A task that always fails ends FAILURE and leaves one record in the configured store."""
    result = celery_session_app.send_task("inprocess.broken")
    with pytest.raises(TimeoutError):
        result.get(timeout=20, interval=0.01)
    records = [
        r for r in open_dead_letter_store("memory://in-process").all() if r.task_id == result.id
    ]
    assert len(records) == 1
    assert records[0].attempts == 2
    assert records[0].task_name == "inprocess.broken"
    assert len(retried) == 1


FORGED_CONTEXTS = {
    "negative": {"attempt": -1_000_000},
    "exhausted": {"attempt": 99},
    "errors": {
        "attempt": 1,
        "_xsm_errors": [{"source": "service", "name": "x", "type": "Forged", "message": "planted"}]
        * 5,
    },
    "extra": {"attempt": 0, "note": "<script>planted</script>"},
}


@pytest.mark.parametrize("attack", sorted(FORGED_CONTEXTS))
def test_a_forged_header_on_a_real_message_gets_exactly_the_policy(
    celery_session_app: Celery, celery_session_worker: Any, attack: str
) -> None:
    """Each forged header: the task still runs max_attempts times, and its dead letter is clean."""
    forged = {
        "machine_id": "task",
        "status": "running",
        "state_ids": ["task.retrying"],
        "context": FORGED_CONTEXTS[attack],
        "deadlines": [],
    }
    tag, task_id = f"forged-{attack}", f"forged-{attack}-{uuid.uuid4().hex}"
    headers = {HEADER: json.dumps(forged), TASK_HEADER: task_id}  # its own id: every check runs
    result = celery_session_app.send_task(
        "inprocess.doomed", args=(tag,), headers=headers, task_id=task_id
    )
    with pytest.raises(ConnectionError):
        result.get(timeout=20, interval=0.01)
    assert len(CALLS[tag]) == 3
    records = [
        r for r in open_dead_letter_store("memory://in-process").all() if r.task_id == result.id
    ]
    assert len(records) == 1
    assert records[0].attempts == 3
    assert [e["type"] for e in records[0].errors] == ["ConnectionError"] * 3
    assert "note" not in records[0].snapshot["context"]
