"""Replaying a chain member on a real worker runs the rest of the chain; a chord member is refused.

The operator's path end to end: a prefork worker dead-letters the first task of a chain
while its ledger is down, the ledger comes back, ``xsm-celery dlq replay`` sends the record
again, and the chain's next task runs with the replayed task's result. A chord member's
record is refused by the same command, with a message that names what would be lost.
"""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_lib
from celery import chain, chord

from tests.celery import dead_letter_kill_app as killapp
from tests.celery.dead_letter_workers import dead_letter_cluster, dlq_cli, finished, records_of
from tests.celery.workers import Cluster, wait_for

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    """One worker and the URL of its SQLite dead-letter store."""
    with dead_letter_cluster("sqlite", tmp_path_factory.mktemp("replay-workers")) as found:
        yield found


@pytest.fixture
def results_redis(setup: tuple[Cluster, str]) -> redis_lib.Redis:
    """The Redis where the worker's tasks count calls and record what they received."""
    return redis_lib.Redis.from_url(setup[0].backend)


def recorded(results_redis: redis_lib.Redis, tag: str) -> list[Any]:
    """The values the chain's ``record`` task received under ``tag``."""
    raw = results_redis.lrange(killapp.recorded_key(tag), 0, -1)
    return [ast.literal_eval(item.decode()) for item in raw]


def test_a_replayed_chain_member_runs_the_rest_of_its_chain(
    setup: tuple[Cluster, str], results_redis: redis_lib.Redis
) -> None:
    """flaky | record: flaky gives up; once the ledger is back its replay feeds record."""
    cluster, store_url = setup
    app = cluster.producer()
    tag = uuid.uuid4().hex
    results_redis.set(killapp.down_key(tag), 1, ex=600)
    first = app.signature("dl_kill.flaky", args=(tag, 21))
    result = chain(first, app.signature("dl_kill.record", kwargs={"tag": tag})).apply_async()
    assert finished(result.parent) == "FAILURE"
    (record,) = records_of(store_url, result.parent.id)
    assert [c["task"] for c in record.event["payload"]["canvas"]["chain"]] == ["dl_kill.record"]
    assert recorded(results_redis, tag) == []
    results_redis.delete(killapp.down_key(tag))
    done = dlq_cli(
        cluster,
        store_url,
        "replay",
        record.id,
        "--no-dry-run",
        "--yes",
        "--reason",
        "ledger is back",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert "not registered" not in done.stderr
    expected = {"tag": tag, "doubled": 42}
    assert wait_for(lambda: recorded(results_redis, tag), 30, "the chain's second task") == [
        expected
    ]
    assert int(results_redis.get(killapp.calls_key(tag)) or 0) == 3
    (after,) = records_of(store_url, result.parent.id)
    assert after.resolved_at is not None
    sent = json.loads(done.stdout)
    assert sent["dry_run"] is False
    assert sent["task_id"] not in (None, result.parent.id)
    assert app.AsyncResult(sent["task_id"]).get(timeout=30) == expected


def test_a_chord_member_replay_is_refused_with_what_would_be_lost(
    setup: tuple[Cluster, str], results_redis: redis_lib.Redis
) -> None:
    """A member that gave up inside a chord is not replayed: its callback would never run."""
    cluster, store_url = setup
    app = cluster.producer()
    tag, other = uuid.uuid4().hex, uuid.uuid4().hex
    results_redis.set(killapp.down_key(tag), 1, ex=600)
    header = [
        app.signature("dl_kill.flaky", args=(tag, 1)),
        app.signature("dl_kill.flaky", args=(other, 2)),
    ]
    result = chord(header, app.signature("dl_kill.record", kwargs={"tag": tag})).apply_async()
    failing = result.parent.results[0]
    assert finished(failing) == "FAILURE"
    (record,) = records_of(store_url, failing.id)
    assert record.event["payload"]["canvas"]["chord"]["task"] == "dl_kill.record"
    results_redis.delete(killapp.down_key(tag))
    refused = dlq_cli(
        cluster,
        store_url,
        "replay",
        record.id,
        "--no-dry-run",
        "--yes",
        "--reason",
        "ledger is back",
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "member of a chord" in refused.stderr
    assert "'dl_kill.record' did not run" in refused.stderr
    (after,) = records_of(store_url, failing.id)
    assert after.resolved_at is None
    assert int(results_redis.get(killapp.calls_key(tag)) or 0) == 2
    assert recorded(results_redis, tag) == []
