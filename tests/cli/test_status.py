"""``xsm-celery status`` and ``celery -A proj xsm status``: tables, ``--json``, exit codes."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli import proj
from tests.cli.test_celery_command import _empty, run_celery
from tests.contract_dead_letters import make_record
from xsm_celery.cli.group import cli
from xsm_celery.eda import Envelope
from xsm_celery.sqlalchemy import SQLAlchemyOutboxStore, open_dead_letter_store
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore


def _stores(tmp_path: Path) -> tuple[str, str, str]:
    now = time.time()
    dlq, timers, outbox = (f"sqlite:///{tmp_path / n}.db" for n in ("dlq", "timers", "outbox"))
    store = open_dead_letter_store(dlq)
    store.put(make_record(reason="task_exhausted", taken_at=now - 100, task_id="a"))
    store.put(make_record(reason="task_exhausted", taken_at=now - 10_000, task_id="b"))
    store.put(make_record(reason="corrupt", taken_at=now - 200_000, task_id="c"))
    SQLAlchemyTimerStore(timers).schedule("job", now - 5, {})
    SQLAlchemyOutboxStore(outbox).add("orders", Envelope.new(type="order.paid", subject="o"))
    return dlq, timers, outbox


def test_json_report_from_urls(tmp_path: Path) -> None:
    """--json prints dead letters per window, the outbox backlog and the timer lag."""
    dlq, timers, outbox = _stores(tmp_path)
    result = CliRunner().invoke(
        cli, ["status", "--dlq", dlq, "--timers", timers, "--outbox", outbox, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["dead_letters"] == {"1h": {"task_exhausted": 1}, "24h": {"task_exhausted": 2}}
    assert report["outbox"]["pending"] == 1
    assert report["timers"]["pending"] == 1
    assert 4 < report["timers"]["lag_s"] < 60
    assert report["errors"] == {}


def test_tables_name_each_part(tmp_path: Path) -> None:
    """Without --json the report is rich tables with each reason and store on its own row."""
    dlq, timers, outbox = _stores(tmp_path)
    result = CliRunner().invoke(
        cli, ["status", "--dlq", dlq, "--timers", timers, "--outbox", outbox]
    )
    assert result.exit_code == 0, result.output
    assert "Dead letters by reason" in result.output
    assert "task_exhausted" in result.output
    assert "outbox rows" in result.output
    assert "durable timers" in result.output


def test_failed_outbox_rows_are_shown_apart_from_the_backlog(tmp_path: Path) -> None:
    """A row set aside after refusals is counted as failed, not pending, in both outputs."""
    dlq, timers, outbox = _stores(tmp_path)
    store = SQLAlchemyOutboxStore(outbox)
    store.add("orders", Envelope.new(type="order.paid", subject="bad"))
    [_, bad] = store.claim(2, "relay-a", 30)
    store.release([bad.seq - 1], "relay-a")
    assert store.record_refusal(bad.seq, "relay-a", "PreconditionFailed", max_attempts=1) == 1
    args = ["status", "--dlq", dlq, "--timers", timers, "--outbox", outbox]
    report = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert (report["outbox"]["pending"], report["outbox"]["failed"]) == (1, 1)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "failed outbox rows" in result.output


def test_a_missing_store_file_is_refused(tmp_path: Path) -> None:
    """A dead-letter URL naming no file is a one-line refusal with exit status 2."""
    result = CliRunner().invoke(cli, ["status", "--dlq", f"sqlite:///{tmp_path / 'no.db'}"])
    assert result.exit_code == 2
    assert "xsm status: error:" in result.output


def test_nothing_to_read_says_what_to_pass() -> None:
    """Without an app or a URL the command says how to name the stores."""
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 2
    assert "--app module:app" in result.output


def test_an_unreadable_store_exits_1_after_printing_the_rest(tmp_path: Path) -> None:
    """A store that fails on read is reported as an error line; the exit status is 1."""
    dlq, _, _ = _stores(tmp_path)
    broken = tmp_path / "broken.db"
    with sqlite3.connect(broken) as conn:
        conn.execute("CREATE TABLE xsm_timers (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO xsm_timers VALUES ('t-1')")
    result = CliRunner().invoke(
        cli, ["status", "--dlq", dlq, "--timers", f"sqlite:///{broken}", "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert "timers" in report["errors"]
    assert report["dead_letters"]["1h"] == {"task_exhausted": 1}


def test_the_celery_subcommand_reads_the_apps_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``celery -A proj xsm status`` reads the app's stores and creates none that is missing."""
    monkeypatch.chdir(tmp_path)
    store = open_dead_letter_store(proj.STORE_URL)
    _empty(store)
    store.put(make_record(reason="worker_lost", taken_at=time.time() - 5))
    try:
        result = run_celery("xsm", "status", "--no-workers", "--json")
    finally:
        _empty(store)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["dead_letters"]["1h"] == {"worker_lost": 1}
    assert report["timers"] is None
    assert not (tmp_path / "xsm_celery.db").exists()
