"""A real prefork worker SIGKILLed while it writes a dead letter leaves exactly one, real record.

The task always fails, so its second attempt gives up and writes its dead letter; the
worker's store (``dead_letter_kill_app.KillingDeadLetterStore``) kills the pool child once,
just before the record's transaction commits or just after. The message was acknowledged
late, so it comes back; the redelivery must neither write a second record (a kill after the
commit) nor replace the real errors with ``WorkerLost`` (a kill before it). Both SQL stores
are covered: a SQLite file and a private PostgreSQL schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib

from tests.celery import dead_letter_kill_app as killapp
from tests.celery.dead_letter_workers import dead_letter_cluster, finished, records_of, send
from tests.celery.workers import Cluster
from xsm_celery.celery import replay_task
from xsm_celery.sqlalchemy import open_dead_letter_store

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str]]:
    """One worker and the URL of its dead-letter store."""
    workdir: Path = tmp_path_factory.mktemp(f"dl-kill-{request.param}")
    with dead_letter_cluster(request.param, workdir) as found:
        yield found


@pytest.fixture
def results_redis(setup: tuple[Cluster, str]) -> redis_lib.Redis:
    """The Redis where the worker counts calls and records its kills."""
    return redis_lib.Redis.from_url(setup[0].backend)


@pytest.mark.parametrize("point", [killapp.BEFORE_COMMIT, killapp.AFTER_COMMIT])
def test_a_kill_during_the_dead_letter_write_leaves_one_record_with_the_real_errors(
    setup: tuple[Cluster, str], results_redis: redis_lib.Redis, point: str
) -> None:
    """The redelivery finishes the write: one unresolved, replayable record, no WorkerLost."""
    cluster, store_url = setup
    tag, task_id = uuid.uuid4().hex, uuid.uuid4().hex
    results_redis.set(killapp.plan_key(task_id), point, ex=600)
    result = send(cluster, "always_fails", tag, task_id=task_id)
    assert finished(result) == "FAILURE"
    assert type(result.result).__name__ == "TaskGaveUp", result.result
    assert results_redis.get(killapp.killed_key(task_id)) == point.encode(), cluster.log("dlk")
    assert int(results_redis.get(killapp.calls_key(tag)) or 0) == 2
    records = records_of(store_url, task_id)
    assert len(records) == 1, [(r.id, r.reason, r.errors) for r in records]
    (record,) = records
    assert record.resolved_at is None
    assert record.reason == "task_exhausted"
    assert record.attempts == 2
    assert [e["type"] for e in record.errors] == ["ConnectionError", "ConnectionError"]
    assert [e["message"] for e in record.errors] == [
        "upstream refused call 1",
        "upstream refused call 2",
    ]
    assert record.task_args == [tag]
    store = open_dead_letter_store(store_url, create_table=False)
    dry = replay_task(store, record.id, cluster.producer(), reason="upstream back")
    assert dry.dry_run
    assert dry.args == [tag]
    assert list((cluster.workdir / "spool").glob("*.json")) == []
