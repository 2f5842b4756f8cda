"""What the SQLAlchemy dead-letter store adds to the contract: files, tables, filters, redaction."""

from __future__ import annotations

import datetime as dt
import math
import multiprocessing
import os
import stat
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.contract_dead_letters import make_record
from tests.isolation import run_fresh
from tests.sqlalchemy.test_dead_letters import pg_schema_url  # noqa: F401 (fixture)
from xsm_celery.errors import ConfigurationError, StoreError, StoreUnavailableError
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore, make_engine, open_dead_letter_store
from xsm_celery.sqlalchemy.connect import normalize_url, safe_url
from xsm_celery.sqlalchemy.urls import reset_memory_stores


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def test_a_created_sqlite_file_is_mode_0600(tmp_path: Path) -> None:
    """The file a store creates is readable and writable by its owner only, whatever the umask."""
    path = tmp_path / "dlq.db"
    old = os.umask(0)
    try:
        store = SQLAlchemyDeadLetterStore(_url(path))
        store.put(make_record())
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for sidecar in tmp_path.glob("dlq.db-*"):
        assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600, sidecar
    store.close()


def test_an_existing_file_keeps_its_records_and_mode(tmp_path: Path) -> None:
    """Reopening a store finds what an earlier one wrote and leaves the file's mode alone."""
    path = tmp_path / "dlq.db"
    record = make_record()
    SQLAlchemyDeadLetterStore(_url(path)).put(record)
    path.chmod(0o640)
    again = SQLAlchemyDeadLetterStore(_url(path))
    assert again.get(record.id) == record
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_must_exist_refuses_a_missing_file_and_creates_nothing(tmp_path: Path) -> None:
    """With must_exist, a missing SQLite file is a StoreUnavailableError naming the path."""
    path = tmp_path / "typo.db"
    with pytest.raises(StoreUnavailableError, match="no such SQLite database file") as info:
        SQLAlchemyDeadLetterStore(_url(path), must_exist=True)
    assert "typo.db" in str(info.value)
    assert not path.exists()


def test_a_missing_folder_is_reported_not_created(tmp_path: Path) -> None:
    """A store is never created in a folder that does not exist; the error names the folder."""
    path = tmp_path / "nowhere" / "dlq.db"
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        SQLAlchemyDeadLetterStore(_url(path))
    assert not path.parent.exists()


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Opening a text file as a store fails with StoreUnavailableError, not a driver error."""
    path = tmp_path / "notes.txt"
    path.write_text("this is not a database\n" * 100)
    with pytest.raises(StoreUnavailableError, match="not a database"):
        SQLAlchemyDeadLetterStore(_url(path))


def test_create_table_false_refuses_a_database_without_the_tables(tmp_path: Path) -> None:
    """A reader opening an empty database gets a StoreError naming the missing tables."""
    path = tmp_path / "empty.db"
    with make_engine(_url(path)).begin() as conn:
        conn.execute(sa.text("CREATE TABLE unrelated (x INTEGER)"))
    with pytest.raises(StoreError, match="xsm_dead_letters, xsm_dead_letter_audit"):
        SQLAlchemyDeadLetterStore(_url(path), create_table=False)
    assert "xsm_dead_letters" not in sa.inspect(make_engine(_url(path))).get_table_names()


def test_create_table_false_opens_an_existing_store(tmp_path: Path) -> None:
    """Once a writer created the tables, a reader with create_table=False sees its records."""
    record = make_record()
    SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db")).put(record)
    reader = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"), create_table=False)
    assert reader.get(record.id) == record


def test_every_filter_column_is_indexed(tmp_path: Path) -> None:
    """reason, machine_id, task_name, task_id, resolved_at and taken_at each have an index."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    indexes = sa.inspect(store.engine).get_indexes("xsm_dead_letters")
    indexed = {name for index in indexes for name in index["column_names"]}
    assert {"reason", "machine_id", "task_name", "task_id", "resolved_at", "taken_at"} <= indexed


def test_list_filters_on_the_indexed_columns(tmp_path: Path) -> None:
    """list() narrows by reason, machine, task name and task id, and combines them."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    a = make_record(reason="task_exhausted", task_name="shop.charge", task_id="t-1")
    b = make_record(reason="non_retryable", task_name="shop.charge", task_id="t-2")
    c = make_record(reason="max_attempts", machine_id="order", task_name=None, task_id=None)
    for record in (a, b, c):
        store.put(record)
    assert [r.id for r in store.list(reason="non_retryable")] == [b.id]
    assert {r.id for r in store.list(task_name="shop.charge")} == {a.id, b.id}
    assert [r.id for r in store.list(task_id="t-1")] == [a.id]
    assert [r.id for r in store.list(machine_id="order")] == [c.id]
    assert store.list(task_name="shop.charge", reason="max_attempts") == []


def test_count_and_len(tmp_path: Path) -> None:
    """count() counts unresolved records unless asked; len() counts every record."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    store.put(make_record())
    store.put(make_record(resolved_at=5.0))
    assert store.count() == 1
    assert store.count(include_resolved=True) == 2
    assert len(store) == 2


def test_secrets_are_redacted_again_on_write(tmp_path: Path) -> None:
    """Secret-looking keys in the event, snapshot, envelope and task arguments are masked."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    record = make_record(
        event={"type": "PAY", "payload": {"password": "hunter2", "order": 7}},
        snapshot={"context": {"api_token": "tok_live_1", "attempt": 2}},
        envelope={"id": "e-1", "data": {"secret": "s3cr3t-value", "total": 9}},
        task_args=[{"password": "pw"}, 7],
        task_kwargs={"password": "pw", "amount": 10},
    )
    store.put(record)
    raw = _raw_body(store, record.id)
    for secret in ("hunter2", "tok_live_1", "s3cr3t-value", '"pw"'):
        assert secret not in raw
    got = store.get(record.id)
    assert got is not None
    assert got.event["payload"] == {"password": "***", "order": 7}
    assert got.snapshot["context"]["attempt"] == 2
    assert got.task_args == [{"password": "***"}, 7]
    assert got.task_kwargs == {"password": "***", "amount": 10}


def test_extra_redact_keys_are_masked_too(tmp_path: Path) -> None:
    """Keys given in redact_keys are masked on top of the engine's default list."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"), redact_keys=["loyalty_number"])
    record = make_record(task_kwargs={"loyalty_number": "LN-77", "amount": 10})
    store.put(record)
    got = store.get(record.id)
    assert got is not None
    assert got.task_kwargs == {"loyalty_number": "***", "amount": 10}


def _raw_body(store: SQLAlchemyDeadLetterStore, record_id: str) -> str:
    with store.engine.connect() as conn:
        query = sa.text("SELECT body FROM xsm_dead_letters WHERE id = :id")
        return str(conn.execute(query, {"id": record_id}).scalar_one())


def test_values_json_cannot_hold_are_stored_as_text(tmp_path: Path) -> None:
    """Dates, decimals and sets in task arguments are kept as their str(), like to_json()."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    when = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    record = make_record(task_args=[when, Decimal("9.99")], task_kwargs={"at": when})
    store.put(record)
    got = store.get(record.id)
    assert got is not None
    assert got.task_args == [str(when), "9.99"]
    assert got.task_kwargs == {"at": str(when)}


def test_the_audit_table_records_who_when_what_why_and_outcome(tmp_path: Path) -> None:
    """Audit rows are real rows of xsm_dead_letter_audit with every column filled."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"), wall=lambda: 1234.5)
    store.audit("r-1", "replay", actor="ana", reason="fixed", outcome="enqueued t-9")
    with store.engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT record_id, at, action, actor, reason, outcome FROM xsm_dead_letter_audit"
            )
        ).one()
    assert tuple(row) == ("r-1", 1234.5, "replay", "ana", "fixed", "enqueued t-9")


def test_an_empty_actor_is_replaced_by_the_login_name(tmp_path: Path) -> None:
    """An audit row never has an empty actor: the process's login name stands in."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    store.audit("r-1", "purge", actor="", reason="retention", outcome="purged 0")
    assert store.audit_log()[0]["actor"]


def test_two_stores_on_one_file_share_records(tmp_path: Path) -> None:
    """A worker's store and an operator's store on the same file see each other's writes."""
    writer = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))
    reader = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"), create_table=False)
    record = make_record()
    writer.put(record)
    assert reader.get(record.id) == record
    assert reader.mark_resolved(record.id, 99.0)
    resolved = writer.get(record.id)
    assert resolved is not None
    assert resolved.resolved_at == 99.0


def test_a_forked_worker_process_can_write(tmp_path: Path) -> None:
    """A store used before fork() keeps working in the child (its pool is reset) and parent."""
    run_fresh(__name__, "forked_worker_process_writes", str(tmp_path / "dlq.db"))


def forked_worker_process_writes(path: str) -> None:
    """The scenario of test_a_forked_worker_process_can_write, run in a fresh interpreter."""
    url = _url(Path(path))
    store = SQLAlchemyDeadLetterStore(url)
    first = make_record()
    store.put(first)
    context = multiprocessing.get_context("fork")
    child_id = make_record().id
    process = context.Process(target=_fork_put, args=(store, child_id))
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert {r.id for r in store.all()} == {first.id, child_id}


def _fork_put(store: SQLAlchemyDeadLetterStore, record_id: str) -> None:
    store.put(make_record(id=record_id))


def test_concurrent_writers_in_threads_lose_nothing(tmp_path: Path) -> None:
    """Eight threads writing 20 records each to one file leave 160 records."""
    store = SQLAlchemyDeadLetterStore(_url(tmp_path / "dlq.db"))

    def write() -> None:
        for _ in range(20):
            store.put(make_record())

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert store.count() == 160


@pytest.mark.service
def test_postgres_keeps_non_finite_numbers_as_text(pg_schema_url: str) -> None:  # noqa: F811
    """PostgreSQL's JSON refuses NaN, so a NaN argument is stored as the text 'nan'."""
    store = SQLAlchemyDeadLetterStore(pg_schema_url)
    record = make_record(task_kwargs={"ratio": math.nan, "limit": math.inf})
    store.put(record)
    got = store.get(record.id)
    assert got is not None
    assert got.task_kwargs == {"ratio": "nan", "limit": "inf"}


@pytest.mark.service
def test_postgres_uses_psycopg_and_real_tables(pg_schema_url: str) -> None:  # noqa: F811
    """A postgresql:// URL runs on psycopg 3 and creates both tables in the database."""
    store = open_dead_letter_store(pg_schema_url)
    assert isinstance(store, SQLAlchemyDeadLetterStore)
    assert store.engine.dialect.driver == "psycopg"
    names = set(sa.inspect(store.engine).get_table_names())
    assert {"xsm_dead_letters", "xsm_dead_letter_audit"} <= names


@pytest.mark.service
def test_postgres_workers_creating_tables_at_once_all_succeed(pg_schema_url: str) -> None:  # noqa: F811
    """Several workers starting together may race to create the tables; none of them fails."""
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            SQLAlchemyDeadLetterStore(pg_schema_url).close()
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []


def test_an_unreachable_server_is_store_unavailable() -> None:
    """A PostgreSQL server that does not answer is a StoreUnavailableError, password hidden."""
    url = "postgresql://ops:s3cret@127.0.0.1:1/db?connect_timeout=2"
    with pytest.raises(StoreUnavailableError) as info:
        SQLAlchemyDeadLetterStore(url)
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)


class TestOpenDeadLetterStore:
    """The URL resolver behind xsm_dead_letter_store, --dlq and the demo."""

    def test_a_store_object_is_returned_as_is(self) -> None:
        """An object with the store methods is used unchanged."""
        store = MemoryDeadLetterStore()
        assert open_dead_letter_store(store) is store

    def test_an_object_that_is_not_a_store_is_refused(self) -> None:
        """Anything else that is not a string is a ConfigurationError."""
        with pytest.raises(ConfigurationError, match="not a dead-letter store"):
            open_dead_letter_store(42)

    def test_memory_urls_are_shared_by_name(self) -> None:
        """memory://x gives the same store every time; another name gives another store."""
        reset_memory_stores()
        first = open_dead_letter_store("memory://jobs")
        assert open_dead_letter_store("memory://jobs") is first
        assert open_dead_letter_store("memory://other") is not first
        assert isinstance(first, MemoryDeadLetterStore)

    def test_a_sqlite_url_opens_a_sqlalchemy_store(self, tmp_path: Path) -> None:
        """sqlite:///path gives a SQLAlchemy store on that file."""
        store = open_dead_letter_store(_url(tmp_path / "dlq.db"))
        assert isinstance(store, SQLAlchemyDeadLetterStore)
        assert (tmp_path / "dlq.db").exists()

    def test_must_exist_passes_through(self, tmp_path: Path) -> None:
        """open_dead_letter_store(..., must_exist=True) never creates the file."""
        with pytest.raises(StoreUnavailableError):
            open_dead_letter_store(_url(tmp_path / "none.db"), must_exist=True)
        assert not (tmp_path / "none.db").exists()

    @pytest.mark.parametrize("url", ["redis://127.0.0.1/0", "mysql://u@h/db", "dlq.db", ""])
    def test_an_unsupported_url_is_refused(self, url: str) -> None:
        """Other schemes and bare paths are a ConfigurationError listing the accepted ones."""
        with pytest.raises(ConfigurationError, match=r"memory://, sqlite:///"):
            open_dead_letter_store(url)

    def test_a_refused_url_does_not_show_its_password(self) -> None:
        """The password of a refused URL is hidden in the message."""
        with pytest.raises(ConfigurationError) as info:
            open_dead_letter_store("mysql://u:hunter2@h/db")
        assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2"),
        ("sqlite:///x.db", "sqlite"),
    ],
)
def test_normalize_url_picks_psycopg(url: str, driver: str) -> None:
    """Bare PostgreSQL URLs get the psycopg 3 driver; explicit drivers are kept."""
    assert normalize_url(url).drivername == driver


def test_safe_url_hides_the_password() -> None:
    """safe_url() masks the password of a URL string, URL object or engine."""
    assert "pw" not in safe_url("postgresql://u:pw@h/db")
    assert "***" in safe_url(normalize_url("postgresql://u:pw@h/db"))


def test_a_bad_url_is_a_configuration_error() -> None:
    """A URL SQLAlchemy cannot parse is a ConfigurationError."""
    with pytest.raises(ConfigurationError, match="cannot parse"):
        normalize_url("::not a url::")


def _open_after(barrier: Any, url: str) -> None:
    barrier.wait(30)
    SQLAlchemyDeadLetterStore(url).close()


def test_worker_processes_creating_a_sqlite_store_at_once_all_succeed(tmp_path: Path) -> None:
    """Prefork children opening a new SQLite store together never fail on 'already exists'."""
    run_fresh(__name__, "processes_create_one_store_at_once", str(tmp_path / "dlq.db"))


def processes_create_one_store_at_once(path: str) -> None:
    """Six forked processes open a new SQLite store at one instant, three times over."""
    context = multiprocessing.get_context("fork")
    url = _url(Path(path))
    for _ in range(3):
        Path(path).unlink(missing_ok=True)
        barrier = context.Barrier(6)
        processes = [context.Process(target=_open_after, args=(barrier, url)) for _ in range(6)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [p.exitcode for p in processes] == [0] * 6
