"""A relay killed mid-batch: another relay takes its rows after the lease, the inbox dedups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kombu.machines import STEP_TYPE, recorder, seen
from xsm_celery.eda import Envelope, InboundDispatcher, OutboxRelay, SQLiteOutboxStore, new_id
from xsm_celery.kombu import KombuBrokerAdapter
from xsm_celery.persistence import MemoryInbox, MemoryStore

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 30.0


def test_killed_relay_rows_are_relayed_by_another_none_lost(
    tmp_path: Path, redis_db_url: str
) -> None:
    """SIGKILL mid-batch; after the lease a second relay publishes the rest (and repeats)."""
    topic = f"relay-faults-{new_id()}"
    outbox_file = tmp_path / "outbox.db"
    progress = tmp_path / "progress"
    outbox = SQLiteOutboxStore(outbox_file)
    rows = [Envelope.new(type=STEP_TYPE, subject=f"acct-{n % 4}", data={"n": n}) for n in range(40)]
    outbox.add_many([(topic, env) for env in rows])
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kombu.relay_victim",
            str(outbox_file),
            redis_db_url,
            str(progress),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 30
        while not (progress.exists() and int(progress.read_text() or 0) >= 10):
            assert victim.poll() is None, "the victim relay exited before it was killed"
            assert time.monotonic() < deadline, "the victim relay made no progress"
            time.sleep(0.02)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        published_by_victim = int(progress.read_text())
        assert 10 <= published_by_victim < len(rows)

        with KombuBrokerAdapter(redis_db_url) as broker:
            survivor = OutboxRelay(outbox, broker, batch=100, owner="survivor", lease_s=LEASE_S)
            assert survivor.relay_all_sync() == 0, "the dead relay's lease must still hold"
            later = SQLiteOutboxStore(outbox_file, clock=lambda: time.time() + LEASE_S + 1)
            after_lease = OutboxRelay(later, broker, batch=100, owner="survivor", lease_s=LEASE_S)
            assert after_lease.relay_all_sync() == len(rows)
            assert outbox.count(pending_only=True) == 0

            store = MemoryStore()
            dispatcher = InboundDispatcher(store, {STEP_TYPE: recorder()}, inbox=MemoryInbox())
            processed = duplicates = 0
            for _ in range(20):
                result = dispatcher.run_once_sync(broker, topic)
                processed += result.processed
                duplicates += result.duplicates
                if processed + duplicates >= len(rows) + published_by_victim:
                    break
            broker.delete(topic)
        assert processed == len(rows)
        assert duplicates == published_by_victim
        for k in range(4):
            assert seen(store, f"acct-{k}") == list(range(k, 40, 4))
    finally:
        if victim.poll() is None:
            victim.kill()
