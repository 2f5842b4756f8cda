"""Nothing escapes the dead-letter store: the local spool, idempotent writes, killed writes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from xsm_celery.celery.deadletter.spool import DeadLetterSpool, dead_letter_id
from xsm_celery.celery.deadletter.writer import DeadLetterWriter, TaskFailure
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.hooks import Fact, FactKind, subscribe
from xsm_celery.patterns import ERRORS_CONTEXT_KEY
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore


class Switchable:
    """A real SQLite dead-letter store behind a switch that makes it unreachable."""

    def __init__(self, path: Path) -> None:
        self.inner = SQLAlchemyDeadLetterStore(f"sqlite:///{path}")
        self.down = False

    def __getattr__(self, name: str) -> Any:
        if self.down:
            raise StoreUnavailableError("dead-letter database is down")
        return getattr(self.inner, name)


def failure(task_id: str, message: str = "card declined") -> TaskFailure:
    """A task run that gave up at attempt 3 with a real error chain."""
    chain = [{"source": "work", "name": "work", "type": "ValueError", "message": message}]
    return TaskFailure(
        task_name="shop.charge",
        task_id=task_id,
        args=["o-1"],
        kwargs={},
        hostname="w1",
        machine_id="task",
        machine_hash="h",
        machine_version=None,
        state_id="task.dead",
        event_type="error.platform.work",
        snapshot={"context": {"attempt": 3, ERRORS_CONTEXT_KEY: chain}},
        error=ValueError(message),
        retryable=False,
    )


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Switchable, DeadLetterSpool, DeadLetterWriter]:
    """A switchable store, a spool directory and the writer using both."""
    store = Switchable(tmp_path / "dlq.db")
    spool = DeadLetterSpool(tmp_path / "spool")
    return store, spool, DeadLetterWriter(lambda: store, None, None, spool=spool)


def test_store_down_at_give_up_keeps_the_record_and_writes_it_later(
    parts: tuple[Switchable, DeadLetterSpool, DeadLetterWriter], caplog: pytest.LogCaptureFixture
) -> None:
    """With the store down the record waits in the spool; the next give-up writes both."""
    store, spool, writer = parts
    facts: list[Fact] = []
    stop = subscribe(facts.append)
    store.down = True
    with caplog.at_level(logging.WARNING):
        first = writer.write(failure("t-1"))
    assert len(spool) == 1
    assert "card declined" not in caplog.text
    assert FactKind.DEAD_LETTER_SPOOLED in [f.kind for f in facts]
    store.down = False
    writer.write(failure("t-2"))
    stop()
    stored = {r.task_id: r for r in store.inner.list()}
    assert set(stored) == {"t-1", "t-2"}
    assert stored["t-1"].id == first.id
    assert stored["t-1"].errors[-1]["message"] == "card declined"
    assert len(spool) == 0


def test_flush_writes_what_waits_and_stops_while_the_store_is_down(
    parts: tuple[Switchable, DeadLetterSpool, DeadLetterWriter],
) -> None:
    """``flush`` writes every spooled record, and keeps them all while the store is down."""
    store, spool, writer = parts
    store.down = True
    for n in range(3):
        writer.write(failure(f"t-{n}"))
    assert spool.flush(store) == 0
    assert len(spool) == 3
    store.down = False
    assert spool.flush(store) == 3
    assert len(store.inner.list()) == 3


def test_the_write_is_idempotent_per_task_run(
    parts: tuple[Switchable, DeadLetterSpool, DeadLetterWriter],
) -> None:
    """Writing the same run's dead letter twice leaves one record, the first one."""
    store, _, writer = parts
    writer.write(failure("t-1"))
    record = store.inner.list()[0]
    store.inner.mark_resolved(record.id, 123.0)
    writer.write(failure("t-1", message="WorkerLost"))
    (only,) = store.inner.list(include_resolved=True)
    assert only.errors[-1]["message"] == "card declined"
    assert only.resolved_at == 123.0
    assert only.id == dead_letter_id("t-1", 3)


def test_a_kill_before_the_commit_is_finished_with_the_real_errors(
    parts: tuple[Switchable, DeadLetterSpool, DeadLetterWriter],
) -> None:
    """A run killed after spooling, before the store write: the redelivery writes the real one."""
    store, spool, writer = parts
    spool.keep(writer.build(failure("t-1")))
    assert store.inner.list() == []
    assert writer.resume("t-1", 3) == dead_letter_id("t-1", 3)
    (record,) = store.inner.list()
    assert [e["type"] for e in record.errors] == ["ValueError"]
    assert writer.resume("t-9", 3) is None


def test_a_kill_after_the_commit_writes_no_second_record(
    parts: tuple[Switchable, DeadLetterSpool, DeadLetterWriter],
) -> None:
    """A run killed after the store write: the redelivery finds it written and adds nothing."""
    store, _, writer = parts
    writer.write(failure("t-1"))
    assert writer.resume("t-1", 3) == dead_letter_id("t-1", 3)
    assert len(store.inner.list()) == 1


def test_spool_files_are_private(tmp_path: Path) -> None:
    """Spooled records hold task arguments: the files are mode 0600 in a 0700 folder."""
    spool = DeadLetterSpool(tmp_path / "spool")
    path = spool.keep(DeadLetterWriter(lambda: None, None, None).build(failure("t-1")))
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "spool").stat().st_mode & 0o777 == 0o700
