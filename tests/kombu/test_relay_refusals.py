"""The relay against real brokers: a refused row is counted and set aside, an outage never is.

Refusals are real: RabbitMQ rejects the declare of a queue that exists with other arguments
(``PRECONDITION_FAILED``, a channel error), and the adapter refuses an envelope over its
``max_bytes``. Outages are real too: a closed port, and the private Redis stopped.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kombu.private_redis import PrivateRedis
from xsm_celery.eda import Envelope, OutboxRelay, SQLiteOutboxStore, new_id
from xsm_celery.errors import BrokerPublishError, BrokerUnavailableError, EnvelopeTooLargeError
from xsm_celery.kombu import KombuBrokerAdapter

pytestmark = pytest.mark.service

MAX_BYTES = 4096


def _env(n: int, *, size: int = 0) -> Envelope:
    return Envelope.new(type="t", subject=f"o-{n}", data={"n": n, "pad": "x" * size})


def _attempts(outbox: SQLiteOutboxStore) -> list[int]:
    return [int(row[0]) for row in outbox.db.query("SELECT attempts FROM xsm_outbox ORDER BY seq")]


def _drain(adapter: KombuBrokerAdapter, topic: str) -> list[Envelope]:
    got = []
    for delivery in adapter.subscribe(topic, timeout=0.5):
        got.append(delivery.envelope)
        delivery.ack()
    return got


def _closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def topics(rabbitmq_url: str) -> Iterator[tuple[str, str]]:
    """A good topic and one whose queue RabbitMQ refuses to declare for the adapter.

    The bad topic's queue is made first as a classic queue; the relay's adapter declares
    quorum queues, which RabbitMQ answers with PRECONDITION_FAILED (inequivalent arg).
    """
    good, bad = f"refusals-{new_id()}", f"refusals-bad-{new_id()}"
    with KombuBrokerAdapter(rabbitmq_url, queue_type="classic") as classic:
        classic.declare(bad)
    yield good, bad
    with KombuBrokerAdapter(rabbitmq_url, queue_type="classic") as classic:
        classic.delete(bad)
    with KombuBrokerAdapter(rabbitmq_url) as cleanup:
        cleanup.delete(good)


def test_a_row_rabbitmq_refuses_is_counted_set_aside_and_later_rows_go_out(
    tmp_path: Path, rabbitmq_url: str, topics: tuple[str, str]
) -> None:
    """Each run counts the refusal and stops there; at max_attempts the rest go out in order."""
    good, bad = topics
    outbox = SQLiteOutboxStore(tmp_path / "outbox.db")
    first = [_env(n) for n in range(2)]
    later = [_env(n) for n in range(2, 5)]
    outbox.add_many([(good, env) for env in first])
    outbox.add(bad, _env(99))
    outbox.add_many([(good, env) for env in later])
    with KombuBrokerAdapter(rabbitmq_url) as broker:
        relay = OutboxRelay(outbox, broker, max_attempts=3)
        for attempt in (1, 2):
            with pytest.raises(BrokerPublishError, match=r"PreconditionFailed|inequivalent"):
                relay.relay_once_sync()
            assert _attempts(outbox) == [0, 0, attempt, 0, 0, 0]
        assert relay.relay_once_sync() == len(later)
        assert relay.relay_once_sync() == 0
        got = _drain(broker, good)
    assert [e.id for e in got] == [e.id for e in first + later]
    [failed] = outbox.failed()
    assert (failed.topic, failed.attempts) == (bad, 3)
    assert "PreconditionFailed" in failed.last_error
    assert outbox.count(pending_only=True) == 0


def test_async_relay_sets_a_refused_row_aside(
    tmp_path: Path, rabbitmq_url: str, topics: tuple[str, str]
) -> None:
    """relay_once over the real adapter counts the same refusal and goes on at the limit."""
    good, bad = topics
    outbox = SQLiteOutboxStore(tmp_path / "outbox.db")
    outbox.add(bad, _env(0))
    rows = [_env(n) for n in range(1, 4)]
    outbox.add_many([(good, env) for env in rows])
    with KombuBrokerAdapter(rabbitmq_url) as broker:
        relay = OutboxRelay(outbox, broker, max_attempts=2)
        with pytest.raises(BrokerPublishError):
            asyncio.run(relay.relay_once())
        assert _attempts(outbox) == [1, 0, 0, 0]
        assert asyncio.run(relay.relay_once()) == len(rows)
        got = _drain(broker, good)
    assert [e.id for e in got] == [e.id for e in rows]
    assert [f.topic for f in outbox.failed()] == [bad]


@pytest.fixture(params=["redis", "rabbitmq"])
def url(request: pytest.FixtureRequest) -> str:
    """The shared Redis (database 5) or RabbitMQ."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_db_url"))
    return str(request.getfixturevalue("rabbitmq_url"))


def test_a_batched_run_with_one_oversized_row_sends_the_others(tmp_path: Path, url: str) -> None:
    """publish_many refuses the whole run; row by row, only the big row is counted."""
    topic = f"refusals-batch-{new_id()}"
    outbox = SQLiteOutboxStore(tmp_path / "outbox.db")
    small = [_env(n) for n in range(4)]
    big = _env(9, size=MAX_BYTES)
    outbox.add_many([(topic, env) for env in [*small[:2], big, *small[2:]]])
    with KombuBrokerAdapter(url, max_bytes=MAX_BYTES) as broker:
        try:
            with pytest.raises(EnvelopeTooLargeError):
                broker.publish_many(topic, [big])
            relay = OutboxRelay(outbox, broker, max_attempts=2)
            with pytest.raises(EnvelopeTooLargeError):
                relay.relay_once_sync()
            assert _attempts(outbox) == [0, 0, 1, 0, 0]
            assert relay.relay_once_sync() == 2
            got = _drain(broker, topic)
        finally:
            broker.delete(topic)
    assert [e.id for e in got] == [e.id for e in small]
    [failed] = outbox.failed()
    assert (failed.envelope.id, failed.attempts) == (big.id, 2)
    assert "EnvelopeTooLargeError" in failed.last_error


def test_a_closed_port_is_an_outage_never_counted(tmp_path: Path) -> None:
    """Ten runs (sync and async) against a RabbitMQ port nobody listens on count nothing."""
    outbox = SQLiteOutboxStore(tmp_path / "outbox.db")
    outbox.add_many([("down", _env(n)) for n in range(3)])
    with KombuBrokerAdapter(
        f"amqp://guest:guest@127.0.0.1:{_closed_port()}//", retries=0
    ) as broker:
        relay = OutboxRelay(outbox, broker, max_attempts=1)
        for _ in range(5):
            with pytest.raises(BrokerUnavailableError, match="unreachable"):
                relay.relay_once_sync()
            with pytest.raises(BrokerUnavailableError, match="unreachable"):
                asyncio.run(relay.relay_once())
    assert _attempts(outbox) == [0, 0, 0]
    assert outbox.failed() == []
    assert outbox.count(pending_only=True) == 3


def test_a_stopped_redis_is_an_outage_and_the_rows_go_out_when_it_is_back(
    tmp_path: Path, running_redis: PrivateRedis
) -> None:
    """The private Redis killed: ten runs count nothing; restarted, every row goes in order."""
    topic = f"refusals-outage-{new_id()}"
    outbox = SQLiteOutboxStore(tmp_path / "outbox.db")
    rows = [_env(n) for n in range(5)]
    outbox.add_many([(topic, env) for env in rows])
    url = running_redis.url(0)
    running_redis.stop()
    try:
        with KombuBrokerAdapter(url, retries=0) as broker:
            relay = OutboxRelay(outbox, broker, max_attempts=1)
            for _ in range(10):
                with pytest.raises(BrokerUnavailableError):
                    relay.relay_once_sync()
        assert _attempts(outbox) == [0] * len(rows)
    finally:
        running_redis.start()
    with KombuBrokerAdapter(url) as broker:
        try:
            assert OutboxRelay(outbox, broker, max_attempts=1).relay_once_sync() == len(rows)
            got = _drain(broker, topic)
        finally:
            broker.delete(topic)
    assert [e.id for e in got] == [e.id for e in rows]
