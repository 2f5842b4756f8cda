"""A hard ``time_limit`` kill on a real prefork worker is retried, then dead-lettered."""

from __future__ import annotations

import uuid

import pytest
import redis as redis_lib

from tests.celery import workerapp
from tests.celery.test_worker_processes import dead_letter, retries, send
from tests.celery.workers import Cluster, wait_for

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_time_limit_kill_is_retried_like_a_lost_worker(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """Attempt 1 overruns ``time_limit`` and is killed; the policy retries it and it succeeds."""
    tag = uuid.uuid4().hex
    result = send(cluster, "overruns", tag, 1)
    assert result.get(timeout=40) == f"in-time:{tag}"
    assert [cause for _, _, cause in retries(results_redis, result.id)] == ["TimeLimitKilled"]
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2


def test_a_task_that_always_overruns_is_dead_lettered_with_its_own_reason(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """Every attempt is killed by the limit: after max_attempts (2) the reason is time_limit."""
    tag = uuid.uuid4().hex
    result = send(cluster, "overruns", tag, 99)
    record = dead_letter(cluster, result.id, timeout=60)
    assert record.reason == "time_limit"
    assert record.attempts == 2
    assert [e["type"] for e in record.errors] == ["TimeLimitKilled"] * 2
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2
    wait_for(lambda: result.state == "FAILURE", 20, "the FAILURE state")
