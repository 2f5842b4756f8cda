"""sqlite://, postgresql:// and postgres:// URLs open the SQLAlchemy store of every kind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sqlalchemy.test_dead_letters import schema_url
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.persistence.opening import open_store
from xsm_celery.sqlalchemy import (
    SQLAlchemyAttemptMarkers,
    SQLAlchemyDeadLetterStore,
    SQLAlchemyInbox,
    SQLAlchemyOutboxStore,
    SQLAlchemyStore,
    SQLAlchemyTimerStore,
)
from xsm_celery.sqlalchemy.journal import SQLAlchemyWorkflowJournal

CLASSES: dict[Any, type] = {
    "snapshots": SQLAlchemyStore,
    "inbox": SQLAlchemyInbox,
    "outbox": SQLAlchemyOutboxStore,
    "timers": SQLAlchemyTimerStore,
    "dead_letters": SQLAlchemyDeadLetterStore,
    "markers": SQLAlchemyAttemptMarkers,
}


@pytest.fixture(params=["sqlite", "postgresql", "postgres", "pgbouncer"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database under each scheme: a SQLite file, a private schema, or PgBouncer's."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stores.db'}"
        return
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    with schema_url(request.getfixturevalue("postgres_url")) as private:
        assert private.startswith("postgresql+psycopg://")
        yield private.replace("postgresql+psycopg://", f"{request.param}://", 1)


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_each_kind_opens_its_sqlalchemy_class(url: str, kind: Any) -> None:
    """The URL opens the SQLAlchemy implementation of that kind, ready to use."""
    store = open_store(url, kind, setting="xsm_test_store")
    assert isinstance(store, CLASSES[kind])


def test_the_opened_stores_work(url: str) -> None:
    """Markers keep their attempt and lifetime; timers and snapshots round-trip."""
    markers = open_store(url, "markers", marker_ttl_s=120)
    markers.mark("t-1", 3)
    assert markers.started("t-1") == 3
    timers = open_store(url, "timers")
    timer_id = timers.schedule("k", 1.0, {"event": "x"})
    assert [t.id for t in timers.due(2.0)] == [timer_id]
    snapshots = open_store(url, "snapshots")
    assert snapshots.save("k", "{}") == 1


def test_a_workflow_family_shares_one_database(url: str) -> None:
    """The workflow kind is a SQLAlchemyStore and its siblings over the same database."""
    family = open_store(url, "workflow")
    assert isinstance(family.snapshots, SQLAlchemyStore)
    assert isinstance(family.inbox, SQLAlchemyInbox)
    assert isinstance(family.timers, SQLAlchemyTimerStore)
    assert isinstance(family.outbox, SQLAlchemyOutboxStore)
    assert isinstance(family.journal, SQLAlchemyWorkflowJournal)
    db = family.snapshots.db
    assert family.inbox.db is db
    assert family.outbox.db is db
    assert family.flat == db.flat
    # Only PostgreSQL has the fewer-round-trip session.
    assert (family.session is not None) == (db.dialect == "postgresql")


def test_a_sqlalchemy_store_object_builds_its_family(tmp_path: Path) -> None:
    """A SQLAlchemyStore given as the workflow's store is asked for its own family."""
    store = SQLAlchemyStore(f"sqlite:///{tmp_path / 'wf.db'}")
    family = open_store(store, "workflow")
    assert family.snapshots is store
    assert isinstance(family.inbox, SQLAlchemyInbox)
    assert family.inbox.db is store.db
    assert family.description == f"sqlite:///{tmp_path / 'wf.db'}"


def test_an_existing_only_dead_letter_store_creates_nothing(tmp_path: Path) -> None:
    """A reader (the CLI) never creates the file a typo named."""
    path = tmp_path / "typo.db"
    with pytest.raises(StoreUnavailableError, match="no such SQLite database file"):
        open_store(f"sqlite:///{path}", "dead_letters", existing_only=True)
    assert not path.exists()


def test_a_projects_opener_outlives_the_packages_lazy_registration(tmp_path: Path) -> None:
    """Registered before the package's SQL openers are loaded, a project's opener still wins."""
    code = textwrap.dedent(
        f"""
        from xsm_celery.persistence import MemoryTimerStore
        from xsm_celery.persistence.opening import open_store, register_scheme
        mine = MemoryTimerStore()
        register_scheme("sqlite", lambda r: mine, kinds=["timers"])
        url = "sqlite:///{tmp_path / "x.db"}"
        assert type(open_store(url, "dead_letters")).__name__ == "SQLAlchemyDeadLetterStore"
        assert open_store(url, "timers") is mine
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
