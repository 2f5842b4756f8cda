"""Envelope dead letters: the SQLite store, redaction, the broker sink, dlq_topic."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.contract_dead_letters import DeadLetterStoreContract, make_record, records
from xsm_celery.eda import (
    BrokerDeadLetterSink,
    DeadLetter,
    DeadLetterStore,
    FakeBrokerAdapter,
    MemoryDeadLetterStore,
    SQLiteDeadLetterStore,
    SyncFakeBrokerAdapter,
    dlq_topic,
    redact_record,
)
from xsm_celery.engine.redact import redact


def _redacted(record: DeadLetter) -> DeadLetter:
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


class TestSQLiteDeadLetterStore(DeadLetterStoreContract):
    """SQLiteDeadLetterStore runs the shared dead-letter store contract."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SQLiteDeadLetterStore]:
        """An empty store in a fresh file."""
        store = SQLiteDeadLetterStore(tmp_path / "dlq.db")
        yield store
        store.close()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(record=records())
    def test_any_record_round_trips(self, store: Any, record: DeadLetter) -> None:
        """Whatever JSON-safe values a record holds, get() returns it, redacted."""
        store.put(record)
        assert store.get(record.id) == _redacted(record)


class TestMemoryDeadLetterStore(DeadLetterStoreContract):
    """The memory store eda re-exports runs the same contract."""

    @pytest.fixture
    def store(self) -> MemoryDeadLetterStore:
        """An empty memory store."""
        return MemoryDeadLetterStore()


def test_memory_store_is_the_patterns_store() -> None:
    """eda's MemoryDeadLetterStore and DeadLetterStore are the patterns classes."""
    from xsm_celery import patterns

    assert MemoryDeadLetterStore is patterns.DeadLetterStore
    assert DeadLetterStore is patterns.DeadLetterStore


def test_sqlite_store_file_is_private(tmp_path: Path) -> None:
    """The dead-letter database is created mode 0600."""
    SQLiteDeadLetterStore(tmp_path / "dlq.db")
    assert stat.S_IMODE(os.stat(tmp_path / "dlq.db").st_mode) == 0o600


def test_sqlite_store_redacts_again_on_write(tmp_path: Path) -> None:
    """A record that reaches the store unredacted is stored with its secrets masked."""
    store = SQLiteDeadLetterStore(tmp_path / "dlq.db", redact_keys=("order_ref",))
    record = make_record(
        envelope={"id": "e", "data": {"password": "hunter2", "order_ref": "r-1", "total": 3}},
        snapshot={"context": {"api_key": "k"}},
    )
    store.put(record)
    stored = store.get(record.id)
    assert stored.envelope["data"] == {"password": "***", "order_ref": "***", "total": 3}
    assert stored.snapshot == {"context": {"api_key": "***"}}
    raw = store.db.query("SELECT body FROM xsm_dead_letters")[0][0]
    assert "hunter2" not in raw


def test_sqlite_store_survives_reopen(tmp_path: Path) -> None:
    """Records and audit entries are on disk: a new store on the file sees them."""
    path = tmp_path / "dlq.db"
    record = make_record()
    first = SQLiteDeadLetterStore(path)
    first.put(record)
    first.audit(record.id, "replay", actor="ana", reason="r", outcome="processed")
    first.close()
    again = SQLiteDeadLetterStore(path)
    assert again.get(record.id) == record
    assert len(again.audit_log(record.id)) == 1
    assert len(again) == 1


def test_redact_record_masks_every_payload_field() -> None:
    """redact_record masks the event payload, snapshot, envelope and task arguments."""
    record = make_record(
        event={"type": "PAY", "payload": {"token": "t"}},
        snapshot={"context": {"secret": "s", "ok": 1}},
        envelope={"data": {"password": "p"}},
        task_kwargs={"cookie": "c"},
    )
    clean = redact_record(record)
    assert clean.event["payload"] == {"token": "***"}
    assert clean.snapshot == {"context": {"secret": "***", "ok": 1}}
    assert clean.envelope == {"data": {"password": "***"}}
    assert clean.task_kwargs == {"cookie": "***"}
    assert record.event["payload"] == {"token": "t"}


def test_redact_record_with_custom_keys() -> None:
    """A custom key list replaces the default one."""
    record = make_record(snapshot={"context": {"total": 5, "password": "p"}})
    clean = redact_record(record, keys=("total",))
    assert clean.snapshot == {"context": {"total": "***", "password": "p"}}


def test_dlq_topic() -> None:
    """orders becomes orders.dlq; an empty topic is refused."""
    assert dlq_topic("orders") == "orders.dlq"
    with pytest.raises(ValueError):
        dlq_topic("")


def test_broker_sink_publishes_redacted_records_and_keeps_them() -> None:
    """The sink publishes xsm.deadletter on <topic>.dlq and puts the record in its store."""
    broker, store = SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
    sink = BrokerDeadLetterSink(broker, "orders", store=store)
    record = make_record(snapshot={"context": {"password": "p"}})
    assert sink(record) == record.id
    [env] = broker.published_on("orders.dlq")
    assert env.type == "xsm.deadletter"
    assert env.data["id"] == record.id
    assert env.data["snapshot"] == {"context": {"password": "***"}}
    assert store.get(record.id) is not None
    assert [r.id for r in sink.list()] == [record.id]


def test_broker_sink_drops_the_snapshot_of_an_oversized_record() -> None:
    """A record too large for an envelope is published without its snapshot."""
    broker = SyncFakeBrokerAdapter()
    sink = BrokerDeadLetterSink(broker, "orders")
    record = make_record(snapshot={"context": {"blob": "x" * 2_000_000}})
    sink.put(record)
    [env] = broker.published_on("orders.dlq")
    assert env.data["snapshot"] == {}


def test_broker_sink_keeps_the_record_when_the_broker_fails() -> None:
    """The store gets the record before the publish, so a broker outage loses nothing."""
    broker, store = SyncFakeBrokerAdapter(), MemoryDeadLetterStore()
    broker.fail_next_publish()
    sink = BrokerDeadLetterSink(broker, "orders", store=store)
    with pytest.raises(Exception, match="injected"):
        sink(make_record())
    assert len(store.all()) == 1


def test_broker_sink_over_an_async_broker() -> None:
    """With an async broker the sink publishes from sync code and inside a running loop."""
    broker = FakeBrokerAdapter()
    sink = BrokerDeadLetterSink(broker, "orders")
    sink(make_record())

    async def inside_loop() -> None:
        sink(make_record())
        await asyncio.sleep(0)

    asyncio.run(inside_loop())
    assert len(broker.published_on("orders.dlq")) == 2


def test_sink_without_store_has_no_reading_methods() -> None:
    """Without a store the sink does not pretend to list records."""
    sink = BrokerDeadLetterSink(SyncFakeBrokerAdapter(), "orders")
    with pytest.raises(AttributeError):
        sink.list()
