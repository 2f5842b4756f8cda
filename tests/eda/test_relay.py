"""OutboxRelay: order, at-least-once marking, leases across relays, failures handed back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.eda.outbox_contract import FakeClock
from xsm_celery.eda import (
    BrokerPublishError,
    BrokerUnavailableError,
    Envelope,
    FakeBrokerAdapter,
    MemoryOutboxStore,
    OutboxRelay,
    SQLiteOutboxStore,
    SyncFakeBrokerAdapter,
)


def _fill(outbox: object, n: int, topic: str = "orders") -> list[Envelope]:
    envs = [Envelope.new(type="order.paid", subject=f"o-{i}", data={"n": i}) for i in range(n)]
    for env in envs:
        outbox.add(topic, env)  # type: ignore[attr-defined]
    return envs


class BatchingBroker(SyncFakeBrokerAdapter):
    """A fake that also offers publish_many and records each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def publish_many(self, topic: str, envelopes: Iterable[Envelope]) -> None:
        items = list(envelopes)
        self.batches.append(len(items))
        for env in items:
            self.publish(topic, env)


class NoLeaseOutbox:
    """An outbox without claim(): the relay must fall back to pending()."""

    def __init__(self) -> None:
        self.inner = MemoryOutboxStore()

    def add(self, topic: str, env: Envelope) -> int:
        return self.inner.add(topic, env)

    def pending(self, limit: int = 100) -> list:  # type: ignore[type-arg]
        return self.inner.pending(limit)

    def mark_sent(self, seqs: Iterable[int]) -> int:
        return self.inner.mark_sent(seqs)


def test_relay_publishes_in_order_and_marks_sent() -> None:
    """Rows go out in sequence order and are marked sent; a second run sends nothing."""
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    envs = _fill(outbox, 5)
    relay = OutboxRelay(outbox, broker)
    assert relay.relay_once_sync() == 5
    assert [e.id for e in broker.published_on("orders")] == [e.id for e in envs]
    assert relay.count(pending_only=True) == 0
    assert relay.relay_once_sync() == 0


def test_relay_respects_the_batch_size() -> None:
    """One run publishes at most `batch` rows; relay_all_sync drains the rest."""
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    _fill(outbox, 25)
    relay = OutboxRelay(outbox, broker, batch=10)
    assert relay.relay_once_sync() == 10
    assert relay.relay_all_sync() == 15
    assert len(broker.published) == 25


def test_failed_publish_keeps_the_row_and_releases_the_rest() -> None:
    """A broker failure marks the accepted rows, hands the others back, and raises."""
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    _fill(outbox, 4)
    relay_a = OutboxRelay(outbox, broker, owner="a")
    original = broker.publish
    calls = {"n": 0}

    def flaky(topic: str, env: Envelope) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise BrokerUnavailableError("broker down")
        original(topic, env)

    broker.publish = flaky  # type: ignore[method-assign]
    with pytest.raises(BrokerPublishError):
        relay_a.relay_once_sync()
    assert outbox.count(pending_only=True) == 2
    relay_b = OutboxRelay(outbox, SyncFakeBrokerAdapter(), owner="b")
    assert relay_b.relay_once_sync() == 2


def test_fail_next_publish_keeps_every_row() -> None:
    """With the first publish failing, no row is lost and the next run sends them all."""
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    _fill(outbox, 3)
    relay = OutboxRelay(outbox, broker)
    broker.fail_next_publish()
    with pytest.raises(BrokerPublishError):
        relay.relay_once_sync()
    assert outbox.count(pending_only=True) == 3
    assert relay.relay_once_sync() == 3


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_relay_dying_mid_batch_leaves_rows_for_another_after_the_lease(
    kind: str, tmp_path: Path
) -> None:
    """Rows of a relay that died are published by another once the lease expires: none lost."""
    clock = FakeClock()
    outbox = (
        MemoryOutboxStore(clock=clock)
        if kind == "memory"
        else SQLiteOutboxStore(tmp_path / "o.db", clock=clock)
    )
    envs = _fill(outbox, 10)
    broker = SyncFakeBrokerAdapter()
    dead = outbox.claim(4, "relay-a", 30)
    for row in dead[:2]:
        broker.publish(row.topic, row.envelope)
    survivor = OutboxRelay(outbox, broker, owner="relay-b", lease_s=30)
    assert survivor.relay_once_sync() == 6
    assert survivor.relay_once_sync() == 0
    clock.advance(31)
    assert survivor.relay_once_sync() == 4
    published = [e.id for e in broker.published_on("orders")]
    assert set(published) == {e.id for e in envs}
    assert len(published) == 12


def test_seed_leases_example() -> None:
    """Two relays with leases never publish one row twice (seed 003)."""
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    _fill(outbox, 10)
    held = outbox.claim(limit=4, owner="relay-a", lease_s=30)
    relay_b = OutboxRelay(outbox, broker, owner="relay-b", lease_s=30)
    assert relay_b.relay_once_sync() == 6
    outbox.release([r.seq for r in held], owner="relay-a")
    assert relay_b.relay_once_sync() == 4
    assert len({e.id for e in broker.published_on("orders")}) == 10


def test_store_without_claim_falls_back_to_pending() -> None:
    """A custom store with no claim() is drained through pending()."""
    outbox, broker = NoLeaseOutbox(), SyncFakeBrokerAdapter()
    _fill(outbox, 3)
    assert OutboxRelay(outbox, broker).relay_once_sync() == 3
    assert OutboxRelay(outbox, broker).relay_once_sync() == 0


def test_batched_publish_groups_runs_of_one_topic() -> None:
    """With publish_many, consecutive rows of one topic go out in one call, order kept."""
    outbox, broker = MemoryOutboxStore(), BatchingBroker()
    _fill(outbox, 3, "a")
    _fill(outbox, 2, "b")
    _fill(outbox, 1, "a")
    assert OutboxRelay(outbox, broker).relay_once_sync() == 6
    assert broker.batches == [3, 2]
    assert [len(broker.published_on(t)) for t in ("a", "b")] == [4, 2]


def test_batched_publish_failure_releases_the_batch() -> None:
    """A failing publish_many leaves the whole run pending."""
    outbox, broker = MemoryOutboxStore(), BatchingBroker()
    _fill(outbox, 3)
    broker.fail_next_publish()
    with pytest.raises(BrokerPublishError):
        OutboxRelay(outbox, broker).relay_once_sync()
    assert outbox.count(pending_only=True) == 3


def test_use_batches_false_publishes_one_by_one() -> None:
    """use_batches=False ignores publish_many."""
    outbox, broker = MemoryOutboxStore(), BatchingBroker()
    _fill(outbox, 3)
    OutboxRelay(outbox, broker, use_batches=False).relay_once_sync()
    assert broker.batches == []


def test_async_relay() -> None:
    """relay_once publishes through an async adapter."""
    outbox, broker = MemoryOutboxStore(), FakeBrokerAdapter()
    _fill(outbox, 3)
    assert asyncio.run(OutboxRelay(outbox, broker).relay_once()) == 3
    assert len(broker.published_on("orders")) == 3


def test_async_relay_failure_keeps_rows() -> None:
    """An async publish failure leaves the rows pending and raises."""
    outbox, broker = MemoryOutboxStore(), FakeBrokerAdapter()
    _fill(outbox, 2)
    broker.fail_next_publish()
    with pytest.raises(BrokerPublishError):
        asyncio.run(OutboxRelay(outbox, broker).relay_once())
    assert outbox.count(pending_only=True) == 2


def test_default_owner_names_host_and_pid() -> None:
    """The default owner is host:pid:id so relays in one process differ."""
    import os
    import socket

    a = OutboxRelay(MemoryOutboxStore(), SyncFakeBrokerAdapter())
    b = OutboxRelay(MemoryOutboxStore(), SyncFakeBrokerAdapter())
    assert a.owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert a.owner != b.owner


@pytest.mark.parametrize(("batch", "lease"), [(0, 30.0), (True, 30.0), (10, 0.0)])
def test_bad_arguments_are_refused(batch: int, lease: float) -> None:
    """A batch below one or a non-positive lease is refused at construction."""
    with pytest.raises(ValueError):
        OutboxRelay(MemoryOutboxStore(), SyncFakeBrokerAdapter(), batch=batch, lease_s=lease)


def test_purge_sent_through_the_relay() -> None:
    """purge_sent on the relay removes old sent rows from its store."""
    clock = FakeClock()
    outbox, broker = MemoryOutboxStore(clock=clock), SyncFakeBrokerAdapter()
    _fill(outbox, 2)
    relay = OutboxRelay(outbox, broker)
    relay.relay_once_sync()
    clock.advance(100)
    assert relay.purge_sent(older_than_s=50) == 2
    assert relay.count() == 0


class ThreadRecordingOutbox(SQLiteOutboxStore):
    """A blocking SQLite outbox that notes which thread made each call."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.threads: list[tuple[str, int]] = []

    def claim(self, *args: object, **kwargs: object) -> list:  # type: ignore[override,type-arg]
        import threading

        self.threads.append(("claim", threading.get_ident()))
        return super().claim(*args, **kwargs)  # type: ignore[arg-type]

    def mark_sent(self, seqs: Iterable[int]) -> int:
        import threading

        self.threads.append(("mark_sent", threading.get_ident()))
        return super().mark_sent(seqs)


def test_async_relay_keeps_blocking_store_calls_off_the_event_loop(tmp_path: Path) -> None:
    """relay_once claims and settles rows in a worker thread, never on the loop's thread."""
    import threading

    outbox = ThreadRecordingOutbox(tmp_path / "outbox.db")
    _fill(outbox, 3)
    broker = FakeBrokerAdapter()
    loop_thread: list[int] = []

    async def relay() -> int:
        loop_thread.append(threading.get_ident())
        return await OutboxRelay(outbox, broker).relay_once()

    assert asyncio.run(relay()) == 3
    assert [name for name, _ in outbox.threads] == ["claim", "mark_sent"]
    assert all(ident != loop_thread[0] for _, ident in outbox.threads)


class RefusingBroker(BatchingBroker):
    """A fake that refuses every publish on one topic, as a broker refusing a message would.

    A real broker cannot refuse one row cheaply in-process; the kombu tests produce real
    refusals (a declare RabbitMQ rejects, an envelope over the adapter's cap).
    """

    def __init__(self, bad_topic: str, error: Exception | None = None) -> None:
        super().__init__()
        self.bad_topic = bad_topic
        self.error = error or BrokerPublishError("the broker refused the message")

    def publish(self, topic: str, envelope: Envelope) -> None:
        if topic == self.bad_topic:
            raise self.error
        super().publish(topic, envelope)


class AsyncRefusingBroker(FakeBrokerAdapter):
    """The async twin of RefusingBroker."""

    def __init__(self, bad_topic: str) -> None:
        super().__init__()
        self.bad_topic = bad_topic

    async def publish(self, topic: str, envelope: Envelope) -> None:
        if topic == self.bad_topic:
            raise ValueError("cannot encode this envelope")
        await super().publish(topic, envelope)


def _attempts(outbox: SQLiteOutboxStore) -> list[int]:
    return [int(row[0]) for row in outbox.db.query("SELECT attempts FROM xsm_outbox ORDER BY seq")]


def _mixed(outbox: object) -> tuple[list[Envelope], Envelope]:
    """Two good rows, one row on the refused topic, two good rows."""
    good = _fill(outbox, 2)
    bad = _fill(outbox, 1, "bad")[0]
    return [*good, *_fill(outbox, 2)], bad


def test_a_refused_row_is_counted_then_set_aside_and_later_rows_go_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Below max_attempts the batch stops at the refused row; at it, the row is failed."""
    from xsm_celery.hooks import Fact, FactKind, subscribe

    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    good, bad = _mixed(outbox)
    broker = RefusingBroker("bad")
    relay = OutboxRelay(outbox, broker, max_attempts=3, use_batches=False)
    facts: list[Fact] = []
    stop = subscribe(facts.append)
    try:
        for attempt in (1, 2):
            with pytest.raises(BrokerPublishError):
                relay.relay_once_sync()
            assert _attempts(outbox) == [0, 0, attempt, 0, 0]
            assert [e.id for e in broker.published_on("orders")] == [e.id for e in good[:2]]
        assert relay.relay_once_sync() == 2
    finally:
        stop()
    assert [e.id for e in broker.published_on("orders")] == [e.id for e in good]
    [failed] = outbox.failed()
    assert (failed.envelope, failed.attempts) == (bad, 3)
    assert "BrokerPublishError: the broker refused the message" in failed.last_error
    assert outbox.count(pending_only=True) == 0
    assert relay.relay_once_sync() == 0, "a failed row is never published again"
    [fact] = [f for f in facts if f.kind is FactKind.OUTBOX_ROW_FAILED]
    assert (fact.fields["seq"], fact.fields["attempts"]) == (failed.seq, 3)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert "set aside as failed" in errors[0]


def test_an_outage_is_never_counted(tmp_path: Path) -> None:
    """Ten runs against a broker that is down leave every row pending with 0 attempts."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    _fill(outbox, 3)
    broker = RefusingBroker("orders", ConnectionRefusedError(111, "Connection refused"))
    relay = OutboxRelay(outbox, broker, max_attempts=2)
    for _ in range(10):
        with pytest.raises(ConnectionRefusedError):
            relay.relay_once_sync()
    assert _attempts(outbox) == [0, 0, 0]
    assert outbox.failed() == []
    assert OutboxRelay(outbox, SyncFakeBrokerAdapter()).relay_once_sync() == 3


def test_relay_all_goes_on_past_a_row_set_aside(tmp_path: Path) -> None:
    """relay_all_sync keeps taking batches when a full batch had a row set aside."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    good, _ = _mixed(outbox)
    more = _fill(outbox, 5)
    relay = OutboxRelay(outbox, RefusingBroker("bad"), batch=3, max_attempts=1)
    assert relay.relay_all_sync() == len(good) + len(more)
    assert outbox.count(failed_only=True) == 1


def test_a_refused_batch_is_published_row_by_row(tmp_path: Path) -> None:
    """A publish_many that fails for one bad row falls back to single publishes of the run."""

    class OneBadRow(BatchingBroker):
        def publish(self, topic: str, envelope: Envelope) -> None:
            if envelope.data.get("bad"):
                raise TypeError("Object of type set is not JSON serializable")
            super().publish(topic, envelope)

    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    first = _fill(outbox, 2)
    bad = Envelope.new(type="order.paid", subject="o-bad", data={"bad": True})
    outbox.add("orders", bad)
    rest = _fill(outbox, 2)
    broker = OneBadRow()
    relay = OutboxRelay(outbox, broker, max_attempts=1)
    assert relay.relay_once_sync() == 4
    assert broker.batches == [5], "one batched call, then single publishes"
    ids = [e.id for e in broker.published_on("orders")]
    assert ids[-4:] == [e.id for e in first + rest], "the good rows, in order, after the retry"
    assert [f.envelope.id for f in outbox.failed()] == [bad.id]


def test_a_batched_outage_is_not_retried_row_by_row(tmp_path: Path) -> None:
    """An outage of publish_many hands the run back at once, uncounted."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    _fill(outbox, 3)
    broker = BatchingBroker()
    broker.fail_next_publish()
    with pytest.raises(BrokerUnavailableError):
        OutboxRelay(outbox, broker, max_attempts=1).relay_once_sync()
    assert _attempts(outbox) == [0, 0, 0]
    assert broker.batches == [3]


def test_async_relay_counts_refusals_and_never_outages(tmp_path: Path) -> None:
    """relay_once counts a refusal, sets the row aside at the limit, and ignores outages."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    good, bad = _mixed(outbox)
    broker = AsyncRefusingBroker("bad")
    relay = OutboxRelay(outbox, broker, max_attempts=2)
    broker.fail_next_publish(times=3)
    for _ in range(3):
        with pytest.raises(BrokerUnavailableError):
            asyncio.run(relay.relay_once())
    assert _attempts(outbox) == [0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="cannot encode"):
        asyncio.run(relay.relay_once())
    assert _attempts(outbox) == [0, 0, 1, 0, 0]
    assert asyncio.run(relay.relay_once()) == 2
    assert [e.id for e in broker.published_on("orders")] == [e.id for e in good]
    assert [f.envelope.id for f in outbox.failed()] == [bad.id]


def test_a_row_requeued_by_the_operator_goes_out_again(tmp_path: Path) -> None:
    """After the cause is fixed, requeue() puts the failed row back for the relay."""
    outbox = SQLiteOutboxStore(tmp_path / "o.db")
    _, bad = _mixed(outbox)
    OutboxRelay(outbox, RefusingBroker("bad"), max_attempts=1).relay_once_sync()
    assert outbox.requeue(outbox.failed()[0].seq)
    fixed = SyncFakeBrokerAdapter()
    assert OutboxRelay(outbox, fixed).relay_once_sync() == 1
    assert [e.id for e in fixed.published_on("bad")] == [bad.id]


@pytest.mark.parametrize("max_attempts", [0, True, 2.5, "5"])
def test_bad_max_attempts_is_refused(max_attempts: object) -> None:
    """max_attempts must be an int >= 1, like batch."""
    with pytest.raises(ValueError, match="max_attempts"):
        OutboxRelay(
            MemoryOutboxStore(),
            SyncFakeBrokerAdapter(),
            max_attempts=max_attempts,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (BrokerUnavailableError("down"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (TimeoutError("timed out"), True),
        (OSError("network unreachable"), True),
        (RuntimeError("wrapped"), False),
        (BrokerPublishError("refused"), False),
        (ValueError("bad value"), False),
        (TypeError("not JSON"), False),
    ],
)
def test_outages_and_refusals_are_told_apart(error: Exception, outage: bool) -> None:
    """is_broker_outage: unreachable brokers are outages, everything else a refusal."""
    from xsm_celery.eda.outages import is_broker_outage

    assert is_broker_outage(error) is outage


def test_an_outage_is_found_through_an_explicit_cause() -> None:
    """A foreign adapter's error raised from a connection error is an outage; ours are judged."""
    from xsm_celery.eda.outages import is_broker_outage

    wrapped = RuntimeError("publish failed")
    wrapped.__cause__ = ConnectionResetError("reset by peer")
    assert is_broker_outage(wrapped)
    refusal = BrokerPublishError("refused")
    refusal.__cause__ = OSError("the refusal's own cause")
    assert not is_broker_outage(refusal)


def test_driver_connection_errors_are_outages_and_channel_errors_refusals() -> None:
    """kombu, py-amqp and redis-py connection errors are outages; their refusals are not."""
    import amqp.exceptions
    import kombu.exceptions
    import redis.exceptions

    from xsm_celery.eda.outages import is_broker_outage

    assert is_broker_outage(kombu.exceptions.OperationalError("Connection refused"))
    assert is_broker_outage(amqp.exceptions.RecoverableConnectionError("gone"))
    assert is_broker_outage(redis.exceptions.ConnectionError("gone"))
    assert not is_broker_outage(amqp.exceptions.PreconditionFailed("inequivalent arg"))
    assert not is_broker_outage(redis.exceptions.ResponseError("WRONGTYPE"))
