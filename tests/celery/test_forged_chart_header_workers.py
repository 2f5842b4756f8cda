"""A copied, unsigned ``xsm_chart`` header on a real worker over Redis cannot end a task unrun.

Task a fails through its whole budget; the header of its last retry (its real error chain) is
copied with the counter set to the maximum, which used to dead-letter a task at once with a's
errors, onto new tasks: bare, and with a's task id header. Each of them runs its function,
keeps its own budget, and no dead letter but a's carries a's errors.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from tests import services
from tests.celery import workerapp
from tests.celery.conftest import _with_db
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for
from xsm_celery.celery.task.header import HEADER, TASK_HEADER, UNSIGNED_WARNING
from xsm_celery.patterns import ERRORS_CONTEXT_KEY
from xsm_celery.sqlalchemy import open_dead_letter_store

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(180)]

TASK = "tests.celery.workerapp.records_headers"
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One prefork worker of ``workerapp`` on a Redis broker, with no signing key."""
    services.require("redis")
    group = Cluster(
        broker=_with_db(services.REDIS_URL, BROKER_DB),
        backend=_with_db(services.REDIS_URL, BACKEND_DB),
        workdir=Path(tmp_path_factory.mktemp("forged-header")),
    )
    group.start_worker("w1")
    try:
        yield group
    finally:
        group.close()


@pytest.fixture(scope="module")
def results(cluster: Cluster) -> redis_lib.Redis:
    """The Redis the worker records calls and headers in."""
    return redis_lib.Redis.from_url(cluster.backend)


@pytest.fixture(scope="module")
def donor(cluster: Cluster, results: redis_lib.Redis) -> dict[str, Any]:
    """Task a, failed through its budget: its id, tag and the header of its last retry."""
    tag = f"a-{uuid.uuid4().hex}"
    result = cluster.producer().send_task(TASK, args=(tag, 99))
    with pytest.raises(ConnectionError):
        result.get(timeout=30)
    seen = [json.loads(h) for h in results.lrange(workerapp.chart_headers_key(tag), 0, -1)]
    assert len(seen) == MAX_ATTEMPTS
    last = seen[-1]
    assert last[TASK_HEADER] == result.id
    return {"id": result.id, "tag": tag, "header": last[HEADER]}


def _forged(donor: dict[str, Any]) -> str:
    """The donor's last real header with the counter at the maximum, its error chain kept."""
    data = json.loads(donor["header"])
    errors = data["context"][ERRORS_CONTEXT_KEY]
    assert [e["message"] for e in errors] == [f"{donor['tag']} failure {n}" for n in (1, 2)]
    data["context"]["attempt"] = MAX_ATTEMPTS
    return json.dumps(data)


def _dead_letter(cluster: Cluster, task_id: str, timeout: float = 30) -> Any:
    store = open_dead_letter_store(cluster.dlq_url)

    def find() -> Any:
        return next((r for r in store.list(limit=500) if r.task_id == task_id), None)

    return wait_for(find, timeout, f"the dead letter of {task_id}")


def _calls(results: redis_lib.Redis, tag: str) -> int:
    return int(results.get(workerapp.calls_key(tag)) or 0)


@pytest.mark.parametrize("with_task_header", [False, True], ids=["bare", "donor-task-id"])
def test_a_copied_header_at_the_budget_runs_the_body_and_keeps_its_own_errors(
    cluster: Cluster, results: redis_lib.Redis, donor: dict[str, Any], with_task_header: bool
) -> None:
    """The task runs all its attempts; its dead letter holds its errors, none of the donor's."""
    tag = f"b-{uuid.uuid4().hex}"
    headers = {HEADER: _forged(donor)}
    if with_task_header:
        headers[TASK_HEADER] = donor["id"]
    result = cluster.producer().send_task(TASK, args=(tag, 99), headers=headers)
    with pytest.raises(ConnectionError, match=f"{tag} failure {MAX_ATTEMPTS}"):
        result.get(timeout=30)
    first = json.loads(results.lindex(workerapp.chart_headers_key(tag), 0) or b"{}")
    assert first[HEADER] == headers[HEADER]  # the forged header did reach the first run
    assert _calls(results, tag) == MAX_ATTEMPTS
    record = _dead_letter(cluster, result.id)
    assert record.attempts == MAX_ATTEMPTS
    assert [e["message"] for e in record.errors] == [f"{tag} failure {n}" for n in (1, 2, 3)]
    assert "another task's header" in cluster.log("w1")


def test_a_copied_header_cannot_stop_a_task_that_succeeds(
    cluster: Cluster, results: redis_lib.Redis, donor: dict[str, Any]
) -> None:
    """A task that would succeed does, on its first run: no dead letter is written for it."""
    tag = f"c-{uuid.uuid4().hex}"
    headers = {HEADER: _forged(donor), TASK_HEADER: donor["id"]}
    result = cluster.producer().send_task(TASK, args=(tag, 0), headers=headers)
    assert result.get(timeout=30) == f"ok:{tag}"
    assert _calls(results, tag) == 1
    store = open_dead_letter_store(cluster.dlq_url)
    assert all(r.task_id != result.id for r in store.list(limit=500))


def test_no_dead_letter_but_the_donors_carries_its_errors(
    cluster: Cluster, donor: dict[str, Any]
) -> None:
    """The donor's own dead letter has its three errors; no other record has any of them."""
    own = _dead_letter(cluster, donor["id"])
    assert [e["message"] for e in own.errors] == [f"{donor['tag']} failure {n}" for n in (1, 2, 3)]
    others = [
        r
        for r in open_dead_letter_store(cluster.dlq_url).list(limit=500)
        if r.task_id != donor["id"]
    ]
    assert all(donor["tag"] not in json.dumps(r.errors) for r in others)


def test_the_unsigned_worker_said_so_once_at_start(cluster: Cluster) -> None:
    """The worker logged what an unsigned header can and cannot do, once, not per task."""
    assert cluster.log("w1").count(UNSIGNED_WARNING) == 1
