"""Fixtures for the CLI tests: a SQLite dead-letter store with one record of each kind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.contract_dead_letters import make_record
from tests.sqlalchemy.test_dead_letters import pg_schema_url  # noqa: F401 (a fixture)
from xsm_celery.cli.group import cli
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore


@dataclass
class Seeded:
    """A store file and the records written to it."""

    url: str
    path: Path
    store: SQLAlchemyDeadLetterStore
    task: DeadLetter
    envelope: DeadLetter
    chart: DeadLetter
    resolved: DeadLetter
    old: DeadLetter


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    """A SQLite store holding a task, an envelope, a chart-state, a resolved and an old record."""
    path = tmp_path / "dlq.db"
    url = f"sqlite:///{path}"
    store = SQLAlchemyDeadLetterStore(url)
    now = time.time()
    task = make_record(taken_at=now - 10, task_kwargs={"card_token": "tok_live_9", "amount": 5})
    envelope = make_record(
        taken_at=now - 20,
        reason="max_attempts",
        machine_id="order",
        state_id="order.paying",
        envelope={"id": "e-1", "type": "xsm.order.PAY", "subject": "o-1", "data": {"n": 1}},
        topic="orders",
        task_name=None,
        task_id=None,
        task_args=None,
        task_kwargs=None,
    )
    chart = make_record(
        taken_at=now - 30,
        reason="dead_letter_state",
        task_name=None,
        task_id=None,
        task_args=None,
        task_kwargs=None,
    )
    resolved = make_record(taken_at=now - 40, resolved_at=now - 5)
    old = make_record(taken_at=now - 90 * 86_400, task_id="t-old")
    for record in (task, envelope, chart, resolved, old):
        store.put(record)
    yield Seeded(url, path, store, task, envelope, chart, resolved, old)
    store.close()


Invoke = Callable[..., Result]


@pytest.fixture
def invoke() -> Invoke:
    """Run ``xsm-celery`` in-process: ``invoke("dlq", "--dlq", url, "list")``."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, list(args), prog_name="xsm-celery")

    return run
