"""Fleet limits that no producer can forge, on real workers over Redis (``fleetapp``).

Each test publishes messages as an attacker or a careless producer would (headers copied,
invented or broken) and checks what the workers did inside the task bodies.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_lib
from click.testing import CliRunner

from tests.celery.fleet_cluster import RATE, FleetCluster, fleet_cluster, rate_over, times_of
from tests.celery.workers import wait_for
from xsm_celery.celery.fleet.headers import DEFERRAL_HEADER, RESERVATION_HEADER
from xsm_celery.celery.fleet.limit_names import key_digest, limit_name
from xsm_celery.cli.group import cli
from xsm_celery.redis.concurrency import RedisSlots
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.sqlalchemy.urls import open_dead_letter_store

pytestmark = pytest.mark.slow

SECRET = "sk_live_51HxQ2cKq8ZzYwVuTsRpOnMlKj"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[FleetCluster]:
    """A fleet cluster on the shared Redis; deferrals older than 4 s are dead-lettered."""
    for cluster in fleet_cluster(tmp_path):
        cluster.extra_env["XSM_TEST_MAX_DEFERRAL_S"] = "4"
        yield cluster


@pytest.fixture
def results(fleet: FleetCluster) -> redis_lib.Redis:
    """The Redis the task bodies record into."""
    return redis_lib.Redis.from_url(fleet.backend)


def test_a_forged_reservation_header_does_not_lift_the_rate(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """40 messages claiming a reserved token run at the fleet rate, every one of them."""
    fleet.start_worker("f1", processes=2)
    fleet.start_worker("f2", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    forged = {RESERVATION_HEADER: "fleet-rated"}
    for _ in range(40):
        producer.send_task("tests.celery.fleetapp.fleet_rated", args=[tag], headers=forged)
    wait_for(lambda: len(times_of(results, tag)) >= 40, 60, "all 40 forged messages to run")
    times = times_of(results, tag)
    assert len(times) == 40
    assert times[-1] - times[0] >= 39 / RATE * 0.9, times[-1] - times[0]
    assert rate_over(times, times[0], 3.0) <= RATE * 1.1
    producer.close()


def test_junk_and_far_future_deferral_headers_lose_no_task(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Broken deferral histories run; a far-future 'first' still dead-letters when starved."""
    fleet.start_worker("j1", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    junk = [
        json.dumps({"first": "abc"}),
        "not json",
        json.dumps({"first": 1e300, "count": 1}),
        json.dumps({"first": 0, "count": -1}),
        json.dumps([1, 2]),
    ]
    for raw in junk:
        producer.send_task(
            "tests.celery.fleetapp.fleet_rated", args=[tag], headers={DEFERRAL_HEADER: raw}
        )
    wait_for(lambda: len(times_of(results, tag)) >= len(junk), 30, "every junk-headed task")
    # A task that can never be admitted, claiming it was first deferred in the far future,
    # is still dead-lettered once Redis' own record is older than the 4 s bound.
    starved = uuid.uuid4().hex[:8]
    store = FleetRedis(fleet.fleet_redis, prefix=fleet.prefix)
    name = limit_name("tests.celery.fleetapp.holder", starved)
    RedisSlots(store, name, 1, lease_s=120).try_acquire()
    sent = producer.send_task(
        "tests.celery.fleetapp.holder",
        args=[starved, 0.1],
        headers={DEFERRAL_HEADER: json.dumps({"first": 1e300})},
    )
    dlq = open_dead_letter_store(fleet.dlq_url)

    def dead_letter() -> object:
        return [r for r in dlq.list() if r.task_id == sent.id]

    [record] = wait_for(dead_letter, 30, "the starved task's dead letter")
    assert record.reason == "deferred_too_long"
    assert results.llen(f"xsm-test-fleet:{starved}:started") == 0
    # The starved task's failure is logged with its traceback (an operator's ERROR line, its
    # record is the dead letter); no junk header may cause any other traceback.
    log = fleet.log("j1")
    assert log.count("Traceback") == log.count("xsm_celery.errors.DeferredTooLongError:"), log
    producer.close()


def test_a_per_key_limit_never_shows_a_secret_key(
    fleet: FleetCluster, results: redis_lib.Redis
) -> None:
    """Keyed on an API key: Redis, the worker's log and ``breakers --json`` show its digest."""
    fleet.start_worker("k1", processes=2)
    producer = fleet.producer()
    tag = uuid.uuid4().hex[:8]
    for _ in range(4):
        producer.send_task("tests.celery.fleetapp.per_api_key", args=[tag, SECRET])
    wait_for(lambda: len(times_of(results, tag)) >= 4, 30, "four runs at 2/s")
    times = times_of(results, tag)
    assert times[-1] - times[0] >= 1.3  # the per-key limit held: 4 runs at 2/s, burst 1
    fleet_redis = redis_lib.Redis.from_url(fleet.fleet_redis)
    keys = [k.decode() for k in fleet_redis.scan_iter(match=f"{fleet.prefix}*")]
    listed = CliRunner().invoke(
        cli, ["breakers", "--redis", fleet.fleet_redis, "--prefix", fleet.prefix, "--json"]
    )
    assert listed.exit_code == 0, listed.output
    digest = f"#{key_digest(SECRET)}"
    assert digest in listed.output
    assert any(digest in k for k in keys)
    assert digest in fleet.log("k1")  # the deferral lines name the limit by its digest
    assert SECRET not in listed.output + " ".join(keys)
    assert SECRET not in _without_celery_request_lines(fleet.log("k1"))
    producer.close()


def _without_celery_request_lines(log: str) -> str:
    """The worker log without Celery's own received-task lines, which repeat the arguments."""
    return "\n".join(line for line in log.splitlines() if " received" not in line)
