"""Workflows lose nothing on real worker processes while their services fail.

Every test runs real ``celery worker`` (and ``celery beat``) processes of
``tests.faults.faultapp`` against a PostgreSQL cluster and a Redis server of this module's
own (``private_services``), which the tests stop, kill and restart: PostgreSQL down for 30 s
during a step or while a task step's completion arrives, a key held longer than the lock
timeout, a worker SIGKILLed holding a countdown timer, the broker restarted empty, forged
retry counters, and a card number that must never be written anywhere.

Run: ``.venv/bin/python -m pytest tests/faults -m "slow and service"``. ``FAULT_OUTAGE_S``
shortens the 30 s outages when iterating locally.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from celery import Celery

from tests.celery.workers import Cluster, _node_name, wait_for
from tests.faults import faultapp
from tests.faults.private_services import PrivatePostgres, PrivateRedis
from xsm_celery.celery import Workflow

pytestmark = [pytest.mark.slow, pytest.mark.service]

APP = "tests.faults.faultapp"

#: How long PostgreSQL stays down, and how long the slow step holds its key.
OUTAGE_S = float(os.environ.get("FAULT_OUTAGE_S", "30"))

#: Beat's scan period (``timers_every=1``) and ``xsm_workflow_recovery_grace_s``.
BEAT_PERIOD_S = 1.0
GRACE_S = 2.0
#: What a busy 2-core machine adds: a worker's start, a retry's countdown, a Beat tick late.
SLACK_S = 5.0


class Faults:
    """This test's cluster, its producer's workflows and the private services."""

    def __init__(
        self,
        cluster: Cluster,
        producer: Celery,
        flows: dict[str, Workflow],
        pg: PrivatePostgres,
        redis: PrivateRedis,
    ) -> None:
        self.cluster = cluster
        self.producer = producer
        self.flows = flows
        self.pg = pg
        self.redis = redis

    @property
    def counters(self) -> redis_lib.Redis:
        """The Redis database where the actions and the task step count their runs."""
        return redis_lib.Redis.from_url(self.redis.url(3))

    def runs(self, kind: str, key: str) -> int:
        """Runs of ``kind`` (boom, slow, charge, decline) for instance ``key``."""
        return int(self.counters.get(faultapp.runs_key(kind, key)) or 0)

    def start(self, flow: str, tag: str) -> str:
        """A fresh instance of ``flow`` (in this process) whose context knows its key."""
        key = f"{tag}-{uuid.uuid4().hex[:8]}"
        self.flows[flow].start(key, context={"key": key})
        return key

    def context(self, flow: str, key: str) -> dict[str, Any]:
        """The instance's context, read from the store ({} when there is none)."""
        view = self.flows[flow].get(key)
        return {} if view is None else {**view.context, "_state": view.value}

    def dead_letters(self, flow: str, key: str) -> list[Any]:
        """The dead letters the workers wrote for instance ``key``."""
        from xsm_celery.sqlalchemy import open_dead_letter_store

        store = open_dead_letter_store(self.cluster.dlq_url)
        return [r for r in store.list(limit=500) if r.topic == f"workflow:{flow}:{key}"]

    def worker(self, name: str, pool: str = "prefork") -> subprocess.Popen[bytes]:
        """A worker of this test (names are unique per test: one log file each)."""
        return self.cluster.start_worker(name, pool=pool)

    def logs(self) -> str:
        """Everything every process of this test wrote."""
        return "\n".join(p.read_text(errors="replace") for p in self.cluster.workdir.glob("*.log"))


@pytest.fixture
def faults(
    private_postgres: PrivatePostgres, volatile_redis: PrivateRedis, tmp_path: Path
) -> Iterator[Faults]:
    """Services up, a cluster with its own queue and work directory; its processes stopped after."""
    private_postgres.start()
    volatile_redis.start()
    env = {
        "FAULT_STORE": private_postgres.url,
        "FAULT_MARKERS": volatile_redis.url(2),
        "FAULT_COUNTERS": volatile_redis.url(3),
        "FAULT_GRACE": str(GRACE_S),
        "FAULT_SPOOL": str(tmp_path / "spool"),
    }
    cluster = Cluster(
        broker=volatile_redis.url(0),
        backend=volatile_redis.url(1),
        workdir=tmp_path,
        app=APP,
        extra_env=env,
    )
    producer = cluster.producer()
    producer.conf.xsm_workflow_store = private_postgres.url
    producer.conf.xsm_attempt_markers = volatile_redis.url(2)
    flows = faultapp.declare(producer)
    try:
        yield Faults(cluster, producer, flows, private_postgres, volatile_redis)
    finally:
        private_postgres.start()
        volatile_redis.start()
        cluster.close()
        producer.close()


def _dump(faults: Faults) -> str:
    """The tail of every log of the test, for a failure's message."""
    return faults.logs()[-6000:]


def test_an_always_failing_action_under_the_default_policy_is_one_dead_letter_after_five_runs(
    faults: Faults,
) -> None:
    """RetryPolicy(max_attempts=5, base_ms=500): five runs, one dead letter, a failed task."""
    faults.worker("a")
    key = faults.start("faultdefault", "default")
    sent = faults.flows["faultdefault"].send(key, "BOOM")
    [letter] = wait_for(
        lambda: faults.dead_letters("faultdefault", key), 60, "the dead letter", every=0.2
    )
    assert faults.runs("boom", key) == 5, _dump(faults)
    assert letter.attempts == 5
    assert letter.reason == "task_exhausted"
    assert letter.event == {"type": "BOOM", "payload": {}}
    assert [e["type"] for e in letter.errors] == ["RuntimeError"] * 5
    # The task ends (FAILURE), it is not retried again: the counter stays at five.
    result = faults.producer.AsyncResult(sent.id)
    wait_for(lambda: result.state == "FAILURE", 20, "the step task to fail", every=0.2)
    time.sleep(3.0)
    assert faults.runs("boom", key) == 5, _dump(faults)
    assert len(faults.dead_letters("faultdefault", key)) == 1
    assert faults.context("faultdefault", key)["_state"] == "idle"


def test_postgres_down_for_30s_during_a_step_applies_every_event_once(faults: Faults) -> None:
    """A step dies with its connection; events keep arriving; all are applied once it is back."""
    faults.worker("b")
    key = faults.start("fault", "pgstep")
    flow = faults.flows["fault"]
    flow.send(key, "SLOW", seconds=3.0)
    wait_for(lambda: faults.runs("slow", key) >= 1, 30, "the slow step to start")
    for _ in range(5):
        flow.send(key, "NOTE")
    faults.pg.stop()  # the slow step still holds its transaction
    down_at = time.monotonic()
    for _ in range(5):
        flow.send(key, "NOTE")
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
    faults.pg.start()
    wait_for(
        lambda: (
            faults.context("fault", key).get("notes") == 10
            and faults.context("fault", key).get("slow") == 1
        ),
        60,
        "the ten events and the slow step",
        every=0.2,
    )
    time.sleep(2.0)  # a late duplicate would land now
    ctx = faults.context("fault", key)
    assert (ctx["notes"], ctx["slow"]) == (10, 1), _dump(faults)
    assert faults.dead_letters("fault", key) == []


def test_postgres_down_for_30s_while_a_task_step_completes_applies_the_completion_once(
    faults: Faults,
) -> None:
    """The task step runs and answers while the store is down; its result lands once."""
    faults.worker("c")
    faults.cluster.start_beat()
    key = faults.start("fault", "pgtask")
    faults.flows["fault"].send(key, "PAY", amount=7, sleep_s=4.0)
    wait_for(lambda: faults.runs("charge", key) >= 1, 30, "the task step to start")
    faults.pg.stop()
    down_at = time.monotonic()
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
    faults.pg.start()
    wait_for(
        lambda: faults.context("fault", key).get("_state") == "paid",
        60,
        "the completion",
        every=0.2,
    )
    # Long enough for a re-dispatch by the Beat scan (timeout_s 3 s + grace) to answer too.
    time.sleep(faultapp.TASK_STEP_TIMEOUT_S + GRACE_S + BEAT_PERIOD_S + 4.0)
    ctx = faults.context("fault", key)
    assert ctx["_state"] == "paid"
    assert ctx["done"] == 1, _dump(faults)
    assert ctx["receipt"] == {"charged": 7, "key": key}
    assert faults.dead_letters("fault", key) == []


def test_a_key_held_longer_than_the_lock_timeout_loses_no_event(faults: Faults) -> None:
    """SLOW holds the key 30 s (lock timeout 5 s); five NOTEs wait behind it, uncounted."""
    faults.worker("d1")
    faults.worker("d2")
    key = faults.start("fault", "busy")
    flow = faults.flows["fault"]
    flow.send(key, "SLOW", seconds=OUTAGE_S)
    wait_for(lambda: faults.runs("slow", key) >= 1, 30, "the slow step to start")
    for _ in range(5):
        flow.send(key, "NOTE")
    wait_for(
        lambda: (
            faults.context("fault", key).get("slow") == 1
            and faults.context("fault", key).get("notes") == 5
        ),
        OUTAGE_S + 60,
        "the slow step and the five events",
        every=0.2,
    )
    time.sleep(2.0)
    ctx = faults.context("fault", key)
    assert (ctx["slow"], ctx["notes"]) == (1, 5), _dump(faults)
    assert faults.runs("slow", key) == 1
    assert faults.dead_letters("fault", key) == []


def _scheduled(faults: Faults, proc: subprocess.Popen[bytes]) -> int:
    """How many ETA (countdown) messages the worker holds."""
    node = _node_name(proc)
    replies = faults.producer.control.inspect(destination=[node], timeout=1.0).scheduled() or {}
    return len(replies.get(node) or [])


def test_a_worker_killed_holding_a_countdown_timer_does_not_lose_it(faults: Faults) -> None:
    """SIGKILL the worker that holds the 10 s timer's message; Beat re-publishes it."""
    victim = faults.worker("e1", pool="solo")
    key = faults.start("fault", "timer")
    armed_at = time.time()
    faults.flows["fault"].send(key, "WAIT")
    wait_for(
        lambda: faults.context("fault", key).get("_state") == "waiting",
        30,
        "the timer to be armed",
        every=0.1,
    )
    wait_for(lambda: _scheduled(faults, victim) >= 1, 30, "the worker to hold the ETA message")
    faults.cluster.stop(victim, signal.SIGKILL)
    faults.worker("e2", pool="solo")
    faults.cluster.start_beat()
    bound = faultapp.TIMER_MS / 1000 + BEAT_PERIOD_S + GRACE_S + SLACK_S
    wait_for(
        lambda: faults.context("fault", key).get("fired_at"),
        bound + 10,
        "the timer to fire",
        every=0.2,
    )
    ctx = faults.context("fault", key)
    assert ctx["_state"] == "timedOut"
    late = ctx["fired_at"] - armed_at
    assert faultapp.TIMER_MS / 1000 - 1 <= late <= bound, (late, _dump(faults))
    # Only the Beat scan could bring it: Redis hands the held message back after an hour.
    assert "re-published" in faults.logs(), _dump(faults)


def _reconnect(faults: Faults) -> None:
    """Let this process's pooled broker connections meet the restart (the first use fails)."""

    def ping() -> bool:
        app = faults.cluster.producer()
        try:
            app.control.ping(timeout=0.2)
        except redis_lib.ConnectionError:
            return False
        finally:
            app.close()
        return True

    wait_for(ping, 10, "a broker connection after the restart", every=0.1)


def test_the_broker_restarted_empty_loses_no_timer_and_no_task_step(faults: Faults) -> None:
    """Redis (no persistence) restarts with a timer, a task step and events in flight."""
    worker = faults.worker("f1", pool="solo")
    beat = faults.cluster.start_beat()
    flow = faults.flows["fault"]
    timer_key = faults.start("fault", "btimer")
    pay_key = faults.start("fault", "btask")
    note_key = faults.start("fault", "bnote")
    armed_at = time.time()
    flow.send(timer_key, "WAIT")
    wait_for(
        lambda: faults.context("fault", timer_key).get("_state") == "waiting",
        30,
        "the timer to be armed",
        every=0.1,
    )
    flow.send(pay_key, "PAY", amount=11, sleep_s=3.0)
    wait_for(lambda: faults.runs("charge", pay_key) >= 1, 30, "the task step to start")
    dispatched_at = time.time()
    for _ in range(3):
        flow.send(note_key, "NOTE")
    # The crash: every process and the broker's whole memory, at once.
    faults.cluster.stop(worker, signal.SIGKILL)
    faults.cluster.stop(beat, signal.SIGKILL)
    faults.redis.restart()
    _reconnect(faults)
    faults.worker("f2", pool="solo")
    faults.cluster.start_beat()
    back_at = time.time()

    timer_bound = max(armed_at + faultapp.TIMER_MS / 1000, back_at) + BEAT_PERIOD_S + GRACE_S
    # The task step is due timeout_s after its dispatch; sent again, it sleeps 3 s once more.
    task_bound = (
        max(dispatched_at + faultapp.TASK_STEP_TIMEOUT_S, back_at) + BEAT_PERIOD_S + GRACE_S + 3.0
    )
    paid_at: list[float] = []

    def settled() -> bool:
        if not paid_at and faults.context("fault", pay_key).get("_state") == "paid":
            paid_at.append(time.time())
        return bool(paid_at) and bool(faults.context("fault", timer_key).get("fired_at"))

    wait_for(
        settled,
        max(timer_bound, task_bound) + SLACK_S + 20 - time.time(),
        "the timer and the task step's result",
        every=0.2,
    )
    timer = faults.context("fault", timer_key)
    assert timer["_state"] == "timedOut"
    assert timer["fired_at"] <= timer_bound + SLACK_S, (
        timer["fired_at"] - timer_bound,
        _dump(faults),
    )
    assert paid_at[0] <= task_bound + SLACK_S, (paid_at[0] - task_bound, _dump(faults))
    paid = faults.context("fault", pay_key)
    assert paid["done"] == 1
    assert paid["receipt"] == {"charged": 11, "key": pay_key}
    # Events the broker held when it died are gone (nothing recorded them); none is doubled.
    assert faults.context("fault", note_key)["notes"] <= 3
    for key in (timer_key, pay_key, note_key):
        assert faults.dead_letters("fault", key) == []


def test_forged_retry_counters_in_the_step_message_change_nothing(faults: Faults) -> None:
    """failures=99 does not skip the retries; failures=-10**6 does not loop; no forged error."""
    faults.worker("g")
    forged = {
        "skip": {"failures": 99, "lost": 0, "runs": 0, "errors": [{"forged": "x"}]},
        "loop": {"failures": -1_000_000, "lost": 0, "runs": 0, "errors": [{"forged": "x"}]},
    }
    keys = {}
    for label, kwargs in forged.items():
        key = faults.start("fault", f"forged-{label}")
        keys[label] = key
        message = {"id": uuid.uuid4().hex, "kind": "event", "type": "BOOM"}
        faults.producer.send_task("xsm.workflow.fault", args=[key, message], kwargs=kwargs)
    for label, key in keys.items():
        [letter] = wait_for(
            lambda k=key: faults.dead_letters("fault", k), 60, f"the {label} dead letter", every=0.2
        )
        assert letter.attempts == 5, (label, _dump(faults))
        assert "forged" not in json.dumps(letter.errors), letter.errors
        assert letter.task_kwargs in ({}, None)
        assert [e["type"] for e in letter.errors] == ["RuntimeError"] * 5
    time.sleep(2.0)
    for label, key in keys.items():
        assert faults.runs("boom", key) == 5, (label, _dump(faults))
        assert len(faults.dead_letters("fault", key)) == 1


def test_a_card_number_in_a_failing_event_is_written_nowhere(faults: Faults) -> None:
    """The dead letter, the worker's log and the result backend never hold the card number."""
    faults.worker("h")
    key = faults.start("fault", "secret")
    sent = faults.flows["fault"].send(key, "DECLINE", card_number=faultapp.CARD)
    [letter] = wait_for(lambda: faults.dead_letters("fault", key), 60, "the dead letter", every=0.2)
    assert faults.runs("decline", key) == 5
    result = faults.producer.AsyncResult(sent.id)
    wait_for(lambda: result.state == "FAILURE", 20, "the step task to fail", every=0.2)
    stored = json.dumps(letter.to_dict(), default=str)
    assert faultapp.CARD not in stored, stored
    assert "declined" in stored  # the error is there, masked
    log = faults.cluster.log("h")
    assert "declined" in log  # the failure was logged...
    assert faultapp.CARD not in log, [ln for ln in log.splitlines() if faultapp.CARD in ln]
    assert faultapp.CARD not in f"{result.result!r} {result.traceback}"
    backend = redis_lib.Redis.from_url(faults.redis.url(1))
    leaks = [
        k
        for k in backend.scan_iter()
        if backend.type(k) == b"string" and faultapp.CARD.encode() in (backend.get(k) or b"")
    ]
    assert leaks == [], leaks
    spool = faults.cluster.workdir / "spool"
    for path in spool.rglob("*") if spool.exists() else []:
        if path.is_file():
            assert faultapp.CARD not in path.read_text(errors="replace"), path
