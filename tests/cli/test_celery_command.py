"""``celery -A proj xsm dlq ...``: the same commands, with the store from the app's settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner, Result

from tests.cli import proj
from tests.cli.test_replay import drain
from tests.contract_dead_letters import make_record
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.sqlalchemy import open_dead_letter_store

ROOT = Path(__file__).resolve().parents[2]


def run_celery(*args: str) -> Result:
    """Run Celery's own command group in-process, as ``celery -A tests.cli.proj:app ...``."""
    return CliRunner().invoke(celery_main, ["-A", "tests.cli.proj:app", *args])


@pytest.fixture
def configured() -> Iterator[DeadLetter]:
    """One replayable task record in the store the app is configured with (a SQLite file)."""
    store = open_dead_letter_store(proj.STORE_URL)
    _empty(store)
    drain()
    record = make_record(task_name=proj.TASK_NAME, task_args=[7], task_kwargs={"amount": 1.0})
    store.put(record)
    yield record
    _empty(store)
    drain()


def _empty(store: Any) -> None:
    for old in store.list(include_resolved=True, limit=10_000):
        store.delete(old.id)


def test_the_plugin_is_a_celery_sub_command() -> None:
    """Celery lists ``xsm`` among its commands through the celery.commands entry point."""
    assert "xsm" in celery_main.commands


def test_list_reads_the_store_from_the_app_settings(configured: DeadLetter) -> None:
    """Without --dlq the store is the app's xsm_dead_letter_store."""
    result = run_celery("xsm", "dlq", "list", "--json")
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)["dead_letters"]] == [configured.id]


def test_replay_uses_the_app_celery_loaded(configured: DeadLetter) -> None:
    """A task replay needs no --app inside celery: it sends through the -A app."""
    result = run_celery(
        "xsm", "dlq", "replay", configured.id, "--no-dry-run", "--yes", "--reason", "upstream fixed"
    )
    assert result.exit_code == 0, result.output
    [message] = drain()
    assert message.headers["task"] == proj.TASK_NAME


def test_refusals_keep_their_exit_code_inside_celery(configured: DeadLetter) -> None:
    """An unknown id is exit 2 with one line on stderr under celery too."""
    result = run_celery("xsm", "dlq", "show", "nope")
    assert result.exit_code == 2
    assert result.stderr.strip() == "xsm dlq: error: no dead letter with id 'nope'"


def test_dlq_overrides_the_app_setting(configured: DeadLetter, tmp_path: Path) -> None:
    """--dlq wins over the app's setting (here: a missing file, so exit 2)."""
    result = run_celery("xsm", "dlq", "--dlq", f"sqlite:///{tmp_path / 'x.db'}", "list")
    assert result.exit_code == 2
    assert "no such SQLite database file" in result.stderr


@pytest.mark.slow
def test_the_installed_celery_command_runs_it(tmp_path: Path) -> None:
    """A real ``celery -A tests.cli.proj xsm dlq list --json`` process reads the configured file."""
    url = f"sqlite:///{tmp_path / 'dlq.db'}"
    record = make_record()
    open_dead_letter_store(url).put(record)
    env = {**os.environ, "XSM_TEST_DLQ": url, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "celery"),
            "-A",
            "tests.cli.proj",
            "xsm",
            "dlq",
            "list",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dead_letters"][0]["id"] == record.id
