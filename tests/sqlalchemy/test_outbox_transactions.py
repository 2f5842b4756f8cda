"""The transactional outbox on SQLAlchemy: persisted(), the dispatcher, forced rollbacks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.eda.charts import counter, order
from tests.sqlalchemy.test_snapshots import Database, database  # noqa: F401 - fixture
from xsm_celery.eda import (
    Envelope,
    InboundDispatcher,
    OutboxPlugin,
    OutboxRelay,
    SyncFakeBrokerAdapter,
)
from xsm_celery.persistence import OptimisticLock, PessimisticLock, persisted
from xsm_celery.sqlalchemy import SQLAlchemyInbox, SQLAlchemyOutboxStore, SQLAlchemyStore


class FailAfterWrite:
    """A plugin that fails inside the save's transaction, after the outbox wrote its rows."""

    def on_persist(self, interp: Any, store: Any) -> None:
        raise RuntimeError("forced failure after the write")


@pytest.mark.parametrize(
    "lock", [PessimisticLock(), OptimisticLock()], ids=["pessimistic", "optimistic"]
)
def test_forced_rollback_after_the_write_leaves_no_row(database: Database, lock: Any) -> None:  # noqa: F811
    """A failure after the rows were written undoes the snapshot and the rows together."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    plugins = [OutboxPlugin(outbox, topic="orders"), FailAfterWrite()]

    def run() -> None:
        with persisted(store, "o-1", order(), lock=lock, plugins=plugins) as interp:
            interp.send("PAY", total=3)

    with pytest.raises(RuntimeError, match="forced failure after the write"):
        run()
    assert outbox.count() == 0
    assert store.load("o-1") is None


def test_caller_transaction_rollback_drops_the_rows(database: Database) -> None:  # noqa: F811
    """A caller's lock block that fails after persisted() finished rolls everything back."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)

    def run() -> None:
        with store.lock("o-1"):
            with persisted(store, "o-1", order(), plugins=[OutboxPlugin(outbox)]) as interp:
                interp.send("PAY", total=3)
            assert outbox.count() == 1
            raise RuntimeError("forced rollback after the write")

    with pytest.raises(RuntimeError):
        run()
    assert outbox.count() == 0
    assert store.load("o-1") is None


def test_clean_block_commits_snapshot_and_row(database: Database) -> None:  # noqa: F811
    """A clean block leaves both, and the relay publishes the row with its causation."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    with persisted(
        store,
        "o-1",
        order(),
        lock=PessimisticLock(),
        plugins=[OutboxPlugin(outbox, topic="orders")],
    ) as interp:
        interp.send("PAY", total=99)
    broker = SyncFakeBrokerAdapter()
    assert OutboxRelay(outbox, broker).relay_once_sync() == 1
    [paid] = broker.published_on("orders")
    assert (paid.type, paid.data, paid.subject) == ("order.paid", {"total": 99}, "o-1")
    assert store.load("o-1") is not None


def test_dispatcher_on_sqlalchemy_stores_is_effectively_once(database: Database) -> None:  # noqa: F811
    """Snapshot, inbox receipt and outbox row share a transaction; a redelivery is a duplicate."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    dispatcher = InboundDispatcher(
        store,
        {"xsm.counter.INC": counter()},
        lock=PessimisticLock(),
        inbox=SQLAlchemyInbox(store),
        plugins=[OutboxPlugin(outbox, topic="counts")],
    )
    bus = SyncFakeBrokerAdapter()
    cmd = Envelope.new(type="xsm.counter.INC", subject="c-1", data={"n": 1})
    bus.deliver("in", cmd)
    bus.deliver("in", cmd)
    result = dispatcher.run_once_sync(bus, "in")
    assert (result.processed, result.duplicates) == (1, 1)
    [row] = outbox.pending()
    assert row.envelope.causationid == cmd.id
    assert row.envelope.data == {"count": 1}


def test_failed_step_writes_neither_receipt_nor_row(database: Database) -> None:  # noqa: F811
    """A delivery whose step fails leaves no outbox row and no receipt; it is requeued."""
    store = SQLAlchemyStore(database())
    outbox = SQLAlchemyOutboxStore(store)
    inbox = SQLAlchemyInbox(store)
    dispatcher = InboundDispatcher(
        store,
        {"xsm.counter.FAIL": counter()},
        lock=PessimisticLock(),
        inbox=inbox,
        plugins=[OutboxPlugin(outbox)],
    )
    bus = SyncFakeBrokerAdapter()
    bad = Envelope.new(type="xsm.counter.FAIL", subject="c-1")
    bus.deliver("in", bad)
    result = dispatcher.run_once_sync(bus, "in")
    assert result.retried == 1
    assert outbox.count() == 0
    assert store.load("c-1") is None
