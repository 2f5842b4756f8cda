"""OutboxPlugin and the chart's publications: what is published, when, and never on rollback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.eda.charts import counter, order
from xsm_celery import MachineLogic, SyncInterpreter, create_machine
from xsm_celery.eda import (
    PUBLISH_TAG,
    Envelope,
    FakeBrokerAdapter,
    MemoryOutboxStore,
    OutboxPlugin,
    PublishSpec,
    SQLiteOutboxStore,
    SyncFakeBrokerAdapter,
    attach_cause,
    consumed_events,
    publish_specs,
)
from xsm_celery.errors import ConflictError
from xsm_celery.persistence import MemoryStore, PessimisticLock, SQLiteStore, persisted


def _tagged() -> Any:
    return create_machine(
        {
            "id": "acct",
            "initial": "new",
            "context": {"owner": "ana", "password": "hunter2", "_xsm_errors": []},
            "states": {
                "new": {"on": {"OPEN": "open", "NOTE": {"meta": {"publish": True}}}},
                "open": {
                    "tags": [PUBLISH_TAG],
                    "on": {"CLOSE": {"target": "closed", "meta": {"publish": True}}},
                },
                "closed": {"type": "final"},
            },
        }
    )


class FailAfterWrite:
    """A plugin that fails inside the save's transaction, after the outbox wrote its rows."""

    def on_persist(self, interp: Any, store: Any) -> None:
        raise RuntimeError("forced failure after the write")


def test_publish_specs_lists_every_declaration() -> None:
    """publish_specs returns transition and tagged-state publications."""
    specs = publish_specs(_tagged())
    assert PublishSpec("state", "acct.open", None, "xsm.acct.transition.open", None) in specs
    assert (
        PublishSpec("transition", "acct.open", "CLOSE", "xsm.acct.transition.closed", ()) in specs
    )
    assert PublishSpec("transition", "acct.new", "NOTE", "xsm.acct.transition.new", ()) in specs
    [paid] = publish_specs(order())
    assert paid == PublishSpec("transition", "order.open", "PAY", "order.paid", ("total",))


@pytest.mark.parametrize(
    "bad", [5, "", {"type": ""}, {"type": "t", "data": "total"}, {"type": "t", "extra": 1}, [1]]
)
def test_malformed_publish_fails_loudly(bad: object) -> None:
    """A malformed meta.publish raises ValueError naming the path."""
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "a", "meta": {"publish": bad}}}}},
        }
    )
    with pytest.raises(ValueError, match="publish"):
        publish_specs(machine)


def test_malformed_publish_inside_persisted_saves_nothing() -> None:
    """Inside persisted(), a malformed publication fails the save instead of vanishing."""
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "a", "meta": {"publish": 5}}}}},
        }
    )
    store, outbox = MemoryStore(), MemoryOutboxStore()

    def run() -> None:
        with persisted(store, "k", machine, plugins=[OutboxPlugin(outbox)]) as interp:
            interp.send("GO")

    with pytest.raises(ValueError, match="publish"):
        run()
    assert store.load("k") is None


def test_consumed_events_lists_sendable_events() -> None:
    """consumed_events lists the chart's event names, sorted, without engine events."""
    assert consumed_events(_tagged()) == ["CLOSE", "NOTE", "OPEN"]
    assert consumed_events(counter()) == ["FAIL", "INC", "STOP"]


def test_data_fields_are_copied_after_the_actions() -> None:
    """{'type', 'data'} copies the listed context fields as the transition left them."""
    outbox = MemoryOutboxStore()
    interp = SyncInterpreter(order()).use(OutboxPlugin(outbox, topic="ev")).start()
    interp.send("PAY", total=42)
    [row] = outbox.pending()
    assert (row.topic, row.envelope.type, row.envelope.data) == ("ev", "order.paid", {"total": 42})
    assert row.envelope.source == "xsm/order"
    assert row.envelope.machineid == "order"


def test_type_only_and_true_forms() -> None:
    """'type' publishes without data; true publishes xsm.<machine>.transition.<target>."""
    outbox = MemoryOutboxStore()
    interp = SyncInterpreter(_tagged()).use(OutboxPlugin(outbox)).start()
    interp.send("NOTE")
    interp.send("OPEN")
    interp.send("CLOSE")
    types = [r.envelope.type for r in outbox.pending()]
    assert types == [
        "xsm.acct.transition.new",
        "xsm.acct.transition.open",
        "xsm.acct.transition.closed",
    ]


def test_tagged_state_publishes_the_redacted_public_context() -> None:
    """Entering a publish-tagged state sends the whole context, secrets masked, private keys out."""
    outbox = MemoryOutboxStore()
    interp = SyncInterpreter(_tagged()).use(OutboxPlugin(outbox)).start()
    interp.send("OPEN")
    [row] = outbox.pending()
    assert row.envelope.data == {"owner": "ana", "password": "***"}


def test_causation_comes_from_the_attached_envelope() -> None:
    """With an inbound envelope attached, causationid and correlationid are stamped."""
    outbox = MemoryOutboxStore()
    interp = SyncInterpreter(order()).use(OutboxPlugin(outbox)).start()
    cause = Envelope.new(type="xsm.order.PAY", subject="o-1", correlationid="c-9")
    attach_cause(interp, cause)
    interp.send("PAY", total=1)
    env = outbox.pending()[0].envelope
    assert (env.causationid, env.correlationid, env.subject) == (cause.id, "c-9", "o-1")


def test_store_sink_writes_at_the_save() -> None:
    """Inside persisted() rows wait for the save and are written with it."""
    store, outbox = MemoryStore(), MemoryOutboxStore()
    plugin = OutboxPlugin(outbox)
    with persisted(store, "o-1", order(), plugins=[plugin]) as interp:
        interp.send("PAY", total=3)
        assert outbox.count() == 0
        assert len(plugin.pending(interp)) == 1
    assert outbox.count() == 1
    assert outbox.pending()[0].envelope.subject == "o-1"


def test_exception_in_the_block_writes_no_row() -> None:
    """An exception inside persisted() drops the built envelopes with the state."""
    store, outbox = MemoryStore(), MemoryOutboxStore()

    def run() -> None:
        with persisted(store, "o-1", order(), plugins=[OutboxPlugin(outbox)]) as interp:
            interp.send("PAY", total=3)
            raise RuntimeError("request failed")

    with pytest.raises(RuntimeError):
        run()
    assert outbox.count() == 0
    assert store.load("o-1") is None


class TestSQLiteTransactional:
    """Outbox rows commit or roll back with the snapshot on a shared SQLite database."""

    def test_forced_failure_after_the_write_leaves_no_row(self, tmp_path: Path) -> None:
        """A failure inside the save's transaction, after the rows were written, undoes both."""
        store = SQLiteStore(tmp_path / "state.db")
        outbox = SQLiteOutboxStore(store)
        plugins = [OutboxPlugin(outbox), FailAfterWrite()]

        def run() -> None:
            with persisted(
                store, "o-1", order(), lock=PessimisticLock(), plugins=plugins
            ) as interp:
                interp.send("PAY", total=3)

        with pytest.raises(RuntimeError, match="forced failure after the write"):
            run()
        assert outbox.count() == 0
        assert store.load("o-1") is None

    def test_outer_transaction_rollback_drops_rows(self, tmp_path: Path) -> None:
        """A caller's transaction that fails after persisted() rolls the rows back too."""
        store = SQLiteStore(tmp_path / "state.db")
        outbox = SQLiteOutboxStore(store)

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

    def test_clean_exit_commits_both(self, tmp_path: Path) -> None:
        """A clean block leaves the snapshot and its row, visible from another connection."""
        store = SQLiteStore(tmp_path / "state.db")
        with persisted(
            store,
            "o-1",
            order(),
            lock=PessimisticLock(),
            plugins=[OutboxPlugin(SQLiteOutboxStore(store))],
        ) as interp:
            interp.send("PAY", total=3)
        other = SQLiteOutboxStore(tmp_path / "state.db")
        assert other.count(pending_only=True) == 1
        assert SQLiteStore(tmp_path / "state.db").load("o-1") is not None


def test_broker_sink_publishes_after_the_commit() -> None:
    """A broker sink inside persisted() publishes only once the block exited cleanly."""
    store, broker = MemoryStore(), SyncFakeBrokerAdapter()
    with persisted(store, "o-1", order(), plugins=[OutboxPlugin(broker, topic="ev")]) as interp:
        interp.send("PAY", total=3)
        assert broker.published == []
    assert [e.type for e in broker.published_on("ev")] == ["order.paid"]


def test_broker_sink_never_announces_a_rolled_back_state() -> None:
    """A block that raises, or loses its save race, publishes nothing."""
    store, broker = MemoryStore(), SyncFakeBrokerAdapter()
    plugin = OutboxPlugin(broker)

    def conflicting() -> None:
        with persisted(store, "o-1", order(), plugins=[plugin]) as interp:
            interp.send("PAY", total=3)
            store.save("o-1", "{}")

    with pytest.raises(ConflictError):
        conflicting()
    assert broker.published == []


def test_broker_sink_outside_persisted_publishes_per_event() -> None:
    """On a plain interpreter the broker sink publishes when the event settles."""
    broker = SyncFakeBrokerAdapter()
    interp = SyncInterpreter(order()).use(OutboxPlugin(broker)).start()
    interp.send("PAY", total=1)
    assert len(broker.published_on("events")) == 1


def test_async_broker_sink_from_sync_code() -> None:
    """An async broker sink works from code with no running loop."""
    broker = FakeBrokerAdapter()
    interp = SyncInterpreter(order()).use(OutboxPlugin(broker)).start()
    interp.send("PAY", total=1)
    assert len(broker.published_on("events")) == 1


def test_sink_and_topic_are_checked() -> None:
    """A sink that can neither add nor publish, or an empty topic, is refused."""
    with pytest.raises(TypeError):
        OutboxPlugin(object())
    with pytest.raises(ValueError):
        OutboxPlugin(MemoryOutboxStore(), topic="")


def test_logic_actions_do_not_leak_between_instances() -> None:
    """One plugin shared by many instances keeps each instance's envelopes apart."""
    outbox = MemoryOutboxStore()
    plugin = OutboxPlugin(outbox)
    store = MemoryStore()
    machine = create_machine(
        {
            "id": "c",
            "initial": "a",
            "context": {"n": 0},
            "states": {
                "a": {
                    "on": {
                        "GO": {
                            "actions": "inc",
                            "meta": {"publish": {"type": "c.went", "data": ["n"]}},
                        }
                    }
                }
            },
        },
        logic=MachineLogic(actions={"inc": lambda i, ctx, e, a: ctx.update(n=ctx["n"] + 1)}),
    )
    for key in ("a", "b", "a"):
        with persisted(store, key, machine, plugins=[plugin]) as interp:
            interp.send("GO")
    assert [(r.envelope.subject, r.envelope.data["n"]) for r in outbox.pending()] == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
    ]
