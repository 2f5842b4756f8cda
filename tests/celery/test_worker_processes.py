"""Chart tasks on real ``celery worker`` processes, against Redis and against RabbitMQ.

One prefork worker (concurrency 1) per broker runs ``tests.celery.workerapp``; the test
process sends tasks by name and reads results, dead letters and the retries the worker
recorded. The jittered test runs first on each worker, so the worker's seeded rng is fresh.
"""

from __future__ import annotations

import ast
import random
import uuid
from typing import Any

import pytest
import redis as redis_lib
from celery.result import AsyncResult

from tests.celery import workerapp
from tests.celery.workers import Cluster, wait_for
from xsm_celery.celery import replay_task
from xsm_celery.patterns import RetryPolicy
from xsm_celery.sqlalchemy import open_dead_letter_store

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(120)]

TASKS = "tests.celery.workerapp"


def send(cluster: Cluster, name: str, *args: Any, **kwargs: Any) -> AsyncResult:
    """Send ``tests.celery.workerapp.<name>`` by name, as a producer that never imports it."""
    app = cluster.producer()
    return app.send_task(f"{TASKS}.{name}", args=args, kwargs=kwargs)


def retries(results_redis: redis_lib.Redis, task_id: str) -> list[tuple[str, Any, str]]:
    """The retries the worker recorded for ``task_id``: (id, countdown, cause)."""
    raw = results_redis.lrange(workerapp.events_key(task_id), 0, -1)
    return [ast.literal_eval(item.decode()) for item in raw]


def dead_letter(cluster: Cluster, task_id: str, timeout: float = 20) -> Any:
    """The dead letter the workers wrote for ``task_id``."""
    store = open_dead_letter_store(cluster.dlq_url)

    def find() -> Any:
        return next((r for r in store.list(limit=500) if r.task_id == task_id), None)

    return wait_for(find, timeout, f"the dead letter of {task_id}")


def test_jittered_retries_use_the_exact_seeded_countdowns(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """Three failures retry after delay_ms(n)/1000 s exactly, under one id, then succeed."""
    tag = uuid.uuid4().hex
    result = send(cluster, "jittered", tag, 3)
    assert result.get(timeout=30) == f"ok:{tag}"
    policy = RetryPolicy(**workerapp.JITTER_POLICY, rng=random.Random(workerapp.JITTER_SEED).random)
    expected = [policy.delay_ms(n) / 1000.0 for n in (1, 2, 3)]
    recorded = retries(results_redis, result.id)
    assert [when for _, when, _ in recorded] == expected
    assert {task_id for task_id, _, _ in recorded} == {result.id}
    assert [cause for _, _, cause in recorded] == ["ConnectionError"] * 3
    assert len({round(w, 9) for w in expected}) == 3


def test_exhaustion_dead_letters_and_fails_with_the_last_error(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """The third failure gives up in the same run: FAILURE, one record, three errors."""
    tag = uuid.uuid4().hex
    result = send(cluster, "exhausted", tag, card_token="tok_live_secret")
    with pytest.raises(ConnectionError, match="attempt 3 refused"):
        result.get(timeout=30)
    assert result.state == "FAILURE"
    record = dead_letter(cluster, result.id)
    assert record.task_name == f"{TASKS}.exhausted"
    assert record.reason == "task_exhausted"
    assert record.attempts == 3
    assert [e["message"] for e in record.errors] == [f"attempt {n} refused" for n in (1, 2, 3)]
    assert {e["type"] for e in record.errors} == {"ConnectionError"}
    assert record.task_args == [tag]
    assert record.task_kwargs == {"card_token": "***"}
    assert record.state_id == "task.deadLettered"
    assert record.hostname
    assert record.hostname.startswith(f"w1.{cluster.queue}@")
    assert record.machine_hash
    assert record.snapshot["state_ids"] == ["task.deadLettered"]
    assert len(retries(results_redis, result.id)) == 2
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 3


def test_give_up_on_dead_letters_at_once(cluster: Cluster, results_redis: redis_lib.Redis) -> None:
    """A ValueError in give_up_on ends the task on that attempt, with reason non_retryable."""
    tag = uuid.uuid4().hex
    result = send(cluster, "refuses", tag)
    with pytest.raises(ValueError, match="amount must be positive"):
        result.get(timeout=30)
    record = dead_letter(cluster, result.id)
    assert record.reason == "non_retryable"
    assert record.attempts == 2
    assert [e["type"] for e in record.errors] == ["ConnectionError", "ValueError"]
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2


def test_custom_chart_runs_its_own_states_and_actions(cluster: Cluster) -> None:
    """A user chart (other state names, an extra action) drives the task to its own state."""
    tag = uuid.uuid4().hex
    result = send(cluster, "pays", tag)
    with pytest.raises(ConnectionError, match=r"card declined \(2\)"):
        result.get(timeout=30)
    record = dead_letter(cluster, result.id)
    assert record.machine_id == "payment"
    assert record.state_id == "payment.refused"
    assert record.machine_version == "2"
    assert record.snapshot["context"]["declines"] == 2
    assert record.attempts == 2


def test_a_worker_killed_mid_task_counts_as_an_attempt(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """SIGKILL during attempt 1: the redelivery records WorkerLost, retries, then succeeds."""
    tag = uuid.uuid4().hex
    result = send(cluster, "kills_worker", tag, 1)
    assert result.get(timeout=40) == f"survived:{tag}"
    recorded = retries(results_redis, result.id)
    assert [cause for _, _, cause in recorded] == ["WorkerLost"]
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2


def test_a_task_that_always_kills_its_worker_is_dead_lettered(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """Every attempt kills the worker; after max_attempts (3) it is dead-lettered, not looped."""
    tag = uuid.uuid4().hex
    result = send(cluster, "kills_worker", tag, 99)
    record = dead_letter(cluster, result.id, timeout=60)
    assert record.reason == "worker_lost"
    assert record.attempts == 3
    assert [e["type"] for e in record.errors] == ["WorkerLost"] * 3
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 3
    wait_for(lambda: result.state == "FAILURE", 20, "the FAILURE state")


def test_long_delay_waits_in_the_timer_store_until_beat_publishes_it(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """A 2.5 s delay (over the 2 s limit) is a timer row: nothing runs until Beat is up."""
    from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore

    tag = uuid.uuid4().hex
    result = send(cluster, "slow_retry", tag)
    timers = SQLAlchemyTimerStore(cluster.timers_url)
    due = wait_for(lambda: timers.due(now=1e12), 20, "the timer row")
    assert [t.key for t in due] == [result.id]
    assert wait_for(lambda: result.state == "RETRY", 10, "the RETRY state")
    wait_for(lambda: timers.due(now=due[0].due_at), 5, "the timer to fall due", every=0.1)
    assert result.state == "RETRY"
    beat = cluster.start_beat()
    try:
        assert result.get(timeout=30) == f"late:{tag}"
    finally:
        cluster.stop(beat)
    assert timers.due(now=1e12) == []
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2


def test_replay_sends_the_dead_letter_again_with_a_fresh_chart(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """replay_task re-enqueues the original arguments under a new id and resolves the record."""
    tag = uuid.uuid4().hex
    result = send(cluster, "refuses", tag)
    with pytest.raises(ValueError):
        result.get(timeout=30)
    record = dead_letter(cluster, result.id)
    store = open_dead_letter_store(cluster.dlq_url)
    app = cluster.producer()
    dry = replay_task(store, record.id, app, reason="upstream fixed")
    assert dry.dry_run
    assert dry.task_id is None
    assert store.get(record.id).resolved_at is None
    done = replay_task(store, record.id, app, reason="upstream fixed", dry_run=False, actor="ops")
    assert done.task_id
    assert done.task_id != result.id
    assert done.args == [tag]
    assert store.get(record.id).resolved_at is not None
    assert [a["actor"] for a in store.audit_log(record.id)] == ["ops"]
    with pytest.raises(ValueError):
        AsyncResult(done.task_id, app=app).get(timeout=30)
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 3


def test_a_countdown_handed_back_by_a_restarting_worker_is_not_a_lost_attempt(
    cluster: Cluster, results_redis: redis_lib.Redis
) -> None:
    """A retry held for its countdown comes back redelivered after a restart and runs normally."""
    tag = uuid.uuid4().hex
    result = send(cluster, "held_retry", tag)
    wait_for(lambda: retries(results_redis, result.id), 20, "the first retry")
    first = cluster.procs[0]
    cluster.stop(first)
    cluster.start_worker("w2")
    assert result.get(timeout=40) is True
    assert [cause for _, _, cause in retries(results_redis, result.id)] == ["ConnectionError"]
    assert int(results_redis.get(workerapp.calls_key(tag)) or 0) == 2
