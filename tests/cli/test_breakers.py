"""``xsm-celery breakers`` and ``celery -A proj xsm breakers``: list the fleet state, reset, audited."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner, Result

from tests import services
from tests.cli import proj
from xsm_celery.cli.group import cli
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import RedisSlots
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.rate_limit import RedisTokenBucket
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore, open_dead_letter_store


@pytest.fixture
def fleet() -> Iterator[FleetRedis]:
    """A tripped breaker, an empty bucket and a full slot pool under a prefix of this test."""
    services.require("redis")
    store = FleetRedis(services.REDIS_URL, prefix=f"xsm-test-cli-{uuid.uuid4().hex[:8]}:")
    breaker = FleetBreaker(store, "payments", check_interval_ms=0, failure_threshold=1)
    breaker.record(breaker.admit(), "failure")
    RedisTokenBucket(store, "charge[42]", 1, per=60, burst=1).try_acquire()
    RedisSlots(store, "charge", 1, lease_s=60).try_acquire()
    yield store
    keys = list(store.client.scan_iter(match=f"{store.prefix}*", count=500))
    if keys:
        store.client.delete(*keys)


@pytest.fixture
def audit_url(tmp_path: Path) -> str:
    """An existing SQLite dead-letter store whose audit trail records resets."""
    url = f"sqlite:///{tmp_path / 'dlq.db'}"
    SQLAlchemyDeadLetterStore(url).close()
    return url


def run(fleet: FleetRedis, *args: str) -> Result:
    """Run ``xsm-celery breakers`` on the test's Redis and prefix."""
    base = ["breakers", "--redis", services.REDIS_URL, "--prefix", fleet.prefix]
    return CliRunner().invoke(cli, [*base, *args])


def test_breakers_lists_every_breaker_limiter_and_slot_pool(fleet: FleetRedis) -> None:
    """The JSON listing has the open breaker, the emptied per-key bucket and the full pool."""
    result = run(fleet, "--json")
    assert result.exit_code == 0, result.output
    rows = {(r["kind"], r["name"]): r for r in json.loads(result.output)["fleet"]}
    assert rows[("breaker", "payments")]["state"] == "open"
    assert rows[("breaker", "payments")]["detail"]["opened_count"] == 1
    assert rows[("rate", "charge[42]")]["state"] == "limited"
    assert rows[("slots", "charge")]["detail"]["held"] == 1


def test_the_table_names_each_key(fleet: FleetRedis) -> None:
    """Without --json a table shows the same keys."""
    result = run(fleet)
    assert result.exit_code == 0, result.output
    assert "payments" in result.output
    assert "charge[42]" in result.output


def test_reset_needs_a_reason_and_yes(fleet: FleetRedis, audit_url: str) -> None:
    """A reset without --reason or --yes is refused with exit 2 and changes nothing."""
    assert run(fleet, "--dlq", audit_url, "reset", "payments", "--yes").exit_code == 2
    assert run(fleet, "--dlq", audit_url, "reset", "payments", "--reason", "ok").exit_code == 2
    state = FleetBreaker(fleet, "payments", check_interval_ms=0, failure_threshold=1).state()
    assert state["state"] == "open"


def test_reset_closes_the_breaker_for_the_fleet_and_is_audited(
    fleet: FleetRedis, audit_url: str
) -> None:
    """The reset breaker is closed for every worker and the audit trail says who and why."""
    result = run(
        fleet,
        "--dlq",
        audit_url,
        "reset",
        "breaker:payments",
        "--reason",
        "provider is back",
        "--yes",
        "--actor",
        "ops-alice",
    )
    assert result.exit_code == 0, result.output
    state = FleetBreaker(fleet, "payments", check_interval_ms=0, failure_threshold=1).state()
    assert state["state"] == "closed"
    entries = open_dead_letter_store(audit_url).audit_log("fleet:breaker:payments")
    assert [(e["action"], e["actor"], e["reason"]) for e in entries] == [
        ("fleet_reset", "ops-alice", "provider is back")
    ]
    assert "open -> closed" in entries[0]["outcome"]


def test_reset_of_a_limiter_refills_it(fleet: FleetRedis, audit_url: str) -> None:
    """Resetting the per-key bucket deletes its state, so it admits again."""
    result = run(fleet, "--dlq", audit_url, "reset", "charge[42]", "--reason", "x", "--yes")
    assert result.exit_code == 0, result.output
    assert RedisTokenBucket(fleet, "charge[42]", 1, per=60, burst=1).try_acquire().admitted


def test_an_unknown_name_is_refused(fleet: FleetRedis, audit_url: str) -> None:
    """A name no fleet key has is refused with exit 2 and a message naming it."""
    unknown = run(fleet, "--dlq", audit_url, "reset", "nope", "--reason", "x", "--yes")
    assert unknown.exit_code == 2
    assert "no fleet breaker, limiter or slot pool named 'nope'" in unknown.output


def test_the_celery_sub_command_reads_the_apps_settings(fleet: FleetRedis) -> None:
    """``celery -A proj xsm breakers`` finds the Redis and prefix in the app's settings."""
    proj.app.conf.xsm_redis_url = services.REDIS_URL
    proj.app.conf.xsm_fleet_prefix = fleet.prefix
    try:
        result = CliRunner().invoke(
            celery_main, ["-A", "tests.cli.proj:app", "xsm", "breakers", "--json"]
        )
    finally:
        del proj.app.conf["xsm_redis_url"]
        del proj.app.conf["xsm_fleet_prefix"]
    assert result.exit_code == 0, result.output
    names = {r["name"] for r in json.loads(result.output)["fleet"]}
    assert {"payments", "charge[42]", "charge"} <= names
