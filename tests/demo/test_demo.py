"""``python -m xsm_celery.demo`` end to end: a real worker, real dead letters, a real replay."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract_dead_letters import make_record
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

ROOT = Path(__file__).resolve().parents[2]

#: Generous: the demo takes about 15-20 s here; the bound only stops a hung run.
TIMEOUT_S = 150


def run_demo(data: Path, broker_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the demo in a fresh process with its files under ``data``."""
    env = {**os.environ, "XSM_DEMO_DIR": str(data)}
    env.pop("XSM_BROKER_URL", None)
    if broker_url:
        env["XSM_BROKER_URL"] = broker_url
    return subprocess.run(
        [sys.executable, "-m", "xsm_celery.demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=TIMEOUT_S,
        check=False,
    )


def check_run(done: subprocess.CompletedProcess[str], data: Path) -> None:
    """What every successful run leaves behind, whatever the broker."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for text in (
        "retry in",
        "succeeded (quote",
        "worker process was killed",
        "dead letters (4)",
        "replayed: sent xsm_demo.fetch_quote",
        "A-1004 (replay)",
        "audit: xsm-demo replay (upstream fixed)",
        "O-2001  PAY 42.5 sent",
        "O-2002  awaiting_payment -> expired",
    ):
        assert text in out, text
    # The view polls the store, so on a fast broker it may see "paid" without "charging".
    assert re.search(r"O-2001  \S+ -> paid", out), out[-2000:]
    assert re.search(r"O-2001\W+paid\W+done\W+42\.5\W+R-4250", out), out[-2000:]
    assert re.search(r"O-2002\W+expired\W+done\W+0\W", out), out[-2000:]
    store = SQLAlchemyDeadLetterStore(f"sqlite:///{data / 'dead_letters.db'}", create_table=False)
    records = store.list(include_resolved=True)
    by_order = {r.task_args[0]: r for r in records if r.task_args}
    assert {order: r.reason for order, r in by_order.items()} == {
        "A-1004": "task_exhausted",
        "A-1005": "task_exhausted",
        "A-1006": "non_retryable",
        "A-1007": "worker_lost",
    }
    assert [e["type"] for e in by_order["A-1005"].errors] == ["UpstreamTimeout"] * 4
    assert [e["type"] for e in by_order["A-1007"].errors] == ["WorkerLost"] * 4
    assert by_order["A-1006"].attempts == 1
    assert by_order["A-1004"].resolved_at is not None
    assert [e["action"] for e in store.audit_log(by_order["A-1004"].id)] == ["replay"]
    assert stat.S_IMODE((data / "dead_letters.db").stat().st_mode) == 0o600


@pytest.mark.slow
def test_the_demo_runs_end_to_end_on_the_embedded_broker(tmp_path: Path) -> None:
    """On a machine with no server, the demo retries, dead-letters and replays as scripted.

    The folder already holds an earlier run's dead letter and a file of the user's: the
    demo replaces its own files and leaves the user's alone.
    """
    data = tmp_path / "demo-data"
    data.mkdir()
    (data / "notes.txt").write_text("keep me")
    SQLAlchemyDeadLetterStore(f"sqlite:///{data / 'dead_letters.db'}").put(make_record())
    done = run_demo(data)
    check_run(done, data)
    assert (data / "notes.txt").read_text() == "keep me"
    assert "embedded SQLite" in done.stdout
    assert stat.S_IMODE((data / "broker.db").stat().st_mode) == 0o600
    listed = subprocess.run(
        [
            str(Path(sys.executable).parent / "xsm-celery"),
            "dlq",
            "--dlq",
            f"sqlite:///{data / 'dead_letters.db'}",
            "list",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["count"] == 3


@pytest.mark.slow
@pytest.mark.service
def test_the_demo_runs_on_redis_when_asked(tmp_path: Path, redis_url: str) -> None:
    """XSM_BROKER_URL puts the same demo on Redis."""
    data = tmp_path / "demo-data"
    done = run_demo(data, redis_url)
    check_run(done, data)
    assert "redis://" in done.stdout
