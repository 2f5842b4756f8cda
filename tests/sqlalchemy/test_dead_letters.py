"""SQLAlchemyDeadLetterStore on a SQLite file and on PostgreSQL: the shared contract."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings

from tests.contract_dead_letters import DeadLetterStoreContract, records
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore
from xsm_celery.sqlalchemy.connect import normalize_url


@contextmanager
def schema_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    schema = f"xsm_dlq_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(normalize_url(postgres_url))
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = normalize_url(postgres_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["postgresql", "pgbouncer"])
def pg_schema_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped after the test.

    Other packages' tests use the same database, so every test gets its own tables.
    ``pgbouncer`` is a database of its own through PgBouncer in transaction pooling mode.
    """
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    with schema_url(request.getfixturevalue("postgres_url")) as url:
        yield url


def redacted(record: DeadLetter) -> DeadLetter:
    """``record`` with every field the store masks on write masked by the engine's redact()."""
    from xsm_celery.engine.redact import redact

    def mask(value: Any) -> Any:
        return None if value is None else redact(value)

    return replace(
        record,
        event=mask(record.event),
        snapshot=mask(record.snapshot),
        envelope=mask(record.envelope),
        task_args=mask(record.task_args),
        task_kwargs=mask(record.task_kwargs),
    )


def _round_trip_test() -> Any:
    """A fresh copy of the contract's property test for one store class.

    Hypothesis refuses one test function run with instances of several classes
    (``differing_executors``), so each class below gets its own function object. The
    store redacts on write, so a generated key such as ``PASSWORD`` comes back masked.
    """

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(record=records())
    def test_any_record_round_trips(self: Any, store: Any, record: DeadLetter) -> None:
        """Whatever JSON-safe values a record holds, get() returns it, redacted."""
        store.put(record)
        assert store.get(record.id) == redacted(record)

    return test_any_record_round_trips


class TestSQLiteFileStore(DeadLetterStoreContract):
    """The contract on a SQLite file."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        """An empty store in a fresh SQLite file."""
        store = SQLAlchemyDeadLetterStore(f"sqlite:///{tmp_path / 'dlq.db'}")
        yield store
        store.close()

    test_any_record_round_trips = _round_trip_test()


class TestSQLiteMemoryStore(DeadLetterStoreContract):
    """The contract on an in-memory SQLite database shared by every thread."""

    @pytest.fixture
    def store(self) -> Iterator[Any]:
        """An empty store in memory."""
        store = SQLAlchemyDeadLetterStore("sqlite://")
        yield store
        store.close()

    test_any_record_round_trips = _round_trip_test()


@pytest.mark.service
class TestPostgresStore(DeadLetterStoreContract):
    """The contract on PostgreSQL through psycopg."""

    @pytest.fixture
    def store(self, pg_schema_url: str) -> Iterator[Any]:
        """An empty store in a schema of its own."""
        store = SQLAlchemyDeadLetterStore(pg_schema_url)
        yield store
        store.close()

    test_any_record_round_trips = _round_trip_test()
