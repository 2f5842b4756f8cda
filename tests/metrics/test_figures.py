"""Store figures: the read methods on memory and SQLAlchemy stores, and ``read_figures``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.contract_dead_letters import make_record
from tests.figures_contract import (
    NOW,
    FakeWall,
    check_dead_letters_by_reason,
    check_oldest_pending,
    check_timers,
)
from xsm_celery import SyncInterpreter, create_machine
from xsm_celery.eda import Envelope
from xsm_celery.eda.outbox_store import MemoryOutboxStore
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.metrics.figures import Sources, read_figures
from xsm_celery.patterns.dead_letter import DeadLetterStore
from xsm_celery.persistence import MemoryStore
from xsm_celery.persistence.timers import MemoryTimerStore
from xsm_celery.sqlalchemy import SQLAlchemyOutboxStore, open_dead_letter_store
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file, or a private schema of the local PostgreSQL (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'figures.db'}"
        return
    base: str = request.getfixturevalue("postgres_url")
    schema = f"xsm_obs_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(base.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    joiner = "&" if "?" in base else "?"
    try:
        yield f"{base}{joiner}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def test_memory_dead_letters_by_reason() -> None:
    """The memory dead-letter store counts by reason since a time."""
    check_dead_letters_by_reason(DeadLetterStore())


def test_memory_outbox_oldest_pending() -> None:
    """The memory outbox reports its oldest unsent row."""
    wall = FakeWall()
    check_oldest_pending(MemoryOutboxStore(clock=wall), wall)


def test_memory_timers() -> None:
    """The memory timer store reports its count and earliest due time."""
    check_timers(MemoryTimerStore())


def test_sqlalchemy_dead_letters_by_reason(db_url: str) -> None:
    """The SQLAlchemy dead-letter store counts by reason since a time."""
    check_dead_letters_by_reason(open_dead_letter_store(db_url))


def test_sqlalchemy_outbox_oldest_pending(db_url: str) -> None:
    """The SQLAlchemy outbox reports its oldest unsent row."""
    wall = FakeWall()
    check_oldest_pending(SQLAlchemyOutboxStore(db_url, clock=wall), wall)


def test_failed_outbox_rows_are_a_figure_and_a_gauge(db_url: str) -> None:
    """A row set aside after refusals leaves the backlog and shows as xsm_outbox_failed_rows."""
    from xsm_celery.metrics.collector import StoreFiguresCollector

    outbox = SQLAlchemyOutboxStore(db_url)
    for n in range(3):
        outbox.add("orders", Envelope.new(type="order.paid", subject=f"o-{n}"))
    bad = outbox.claim(1, "relay-a", 30)[0]
    outbox.record_refusal(bad.seq, "relay-a", "refused", max_attempts=1)
    figures = read_figures(Sources(outbox=outbox))
    assert figures.outbox is not None
    assert (figures.outbox.pending, figures.outbox.failed) == (2, 1)
    gauges = {
        m.name: m.samples[0].value
        for m in StoreFiguresCollector(Sources(outbox=outbox)).collect()
        if m.name.startswith("xsm_outbox")
    }
    assert gauges["xsm_outbox_backlog"] == 2
    assert gauges["xsm_outbox_failed_rows"] == 1


def test_sqlalchemy_timers(db_url: str) -> None:
    """The SQLAlchemy timer store reports its count and earliest due time."""
    check_timers(SQLAlchemyTimerStore(db_url))


class DownStore:
    """A store whose database is gone."""

    def count(self, **_: Any) -> int:
        raise StoreUnavailableError("database at db:5432 is down")


def test_read_figures_reports_each_part_and_survives_a_down_store() -> None:
    """Every readable part is filled in; the down one is named in errors, not raised."""
    dead = DeadLetterStore()
    dead.put(make_record(reason="corrupt", taken_at=NOW - 60))
    dead.put(make_record(reason="corrupt", taken_at=NOW - 7200, task_id="old"))
    wall = FakeWall(NOW - 90)
    outbox = MemoryOutboxStore(clock=wall)
    outbox.add("orders", Envelope.new(type="order.paid", subject="o-1"))
    timers = MemoryTimerStore()
    timers.schedule("job", NOW - 12.5, {})
    instances = MemoryStore()
    door = create_machine(
        {
            "id": "door",
            "initial": "closed",
            "states": {"closed": {"on": {"OPEN": "open"}}, "open": {}},
        }
    )
    for key, events in (("d1", ["OPEN"]), ("d2", ["OPEN"]), ("d3", [])):
        interp = SyncInterpreter(door).start()
        for event in events:
            interp.send(event)
        instances.save(key, interp.get_snapshot())
    figures = read_figures(
        Sources(dead_letters=dead, outbox=outbox, timers=timers, instances=instances), now=NOW
    )
    assert figures.dead_letters == {"1h": {"corrupt": 1}, "24h": {"corrupt": 2}}
    assert figures.outbox is not None
    assert figures.outbox.pending == 1
    assert figures.outbox.oldest_age_s == 90
    assert figures.timers is not None
    assert figures.timers.lag_s == 12.5
    assert figures.instances == [("door", "open", 2), ("door", "closed", 1)]
    assert figures.errors == {}
    broken = read_figures(Sources(dead_letters=dead, outbox=DownStore()), now=NOW)
    assert "database at db:5432 is down" in broken.errors["outbox"]
    assert broken.dead_letters == figures.dead_letters
    assert broken.to_dict()["errors"] == broken.errors
