"""KombuBrokerAdapter beyond the contract: partitions, batches, broker delivery counts."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from kombu import Connection, Producer

from tests.kombu.private_redis import PrivateRedis
from xsm_celery.eda import Envelope, new_id
from xsm_celery.eda.outages import is_broker_outage
from xsm_celery.errors import BrokerPublishError, BrokerUnavailableError, EnvelopeTooLargeError
from xsm_celery.kombu import KombuBrokerAdapter, partition_of
from xsm_celery.kombu.wire import ANONYMOUS, CONTENT_TYPE
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore

pytestmark = pytest.mark.service


@pytest.fixture(params=["redis", "rabbitmq"])
def url(request: pytest.FixtureRequest) -> str:
    """The broker under test: the shared Redis (database 5) or RabbitMQ."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_db_url"))
    return str(request.getfixturevalue("rabbitmq_url"))


@pytest.fixture
def topic(url: str) -> Iterator[str]:
    """A fresh topic whose queues (up to 4 partitions) are deleted afterwards."""
    name = f"adapter-{new_id()}"
    yield name
    with KombuBrokerAdapter(url, partitions=4) as cleanup:
        cleanup.delete(name)
    with KombuBrokerAdapter(url) as cleanup:
        cleanup.delete(name)


def _drain(adapter: KombuBrokerAdapter, topic: str, timeout: float = 0.5) -> list[Envelope]:
    got = []
    for delivery in adapter.subscribe(topic, timeout=timeout):
        got.append(delivery.envelope)
        delivery.ack()
    return got


def _raw_publish(url: str, queue: str, body: str | bytes, headers: dict[str, object]) -> None:
    """Publish like a foreign producer would: straight through kombu, any headers."""
    with Connection(url) as conn:
        Producer(conn.default_channel).publish(
            body,
            routing_key=queue,
            exchange=ANONYMOUS,
            headers=headers,
            content_type=CONTENT_TYPE,
            content_encoding="utf-8",
        )


def test_each_partition_consumer_gets_only_its_subjects(url: str, topic: str) -> None:
    """With four partitions, a consumer of partitions {0,1} and one of {2,3} split the work."""
    with KombuBrokerAdapter(url, partitions=4) as producer:
        sent = [Envelope.new(type="t", subject=f"o-{n % 10}", data={"n": n}) for n in range(40)]
        producer.publish_many(topic, sent)
    with (
        KombuBrokerAdapter(url, partitions=4, consume=[0, 1]) as left,
        KombuBrokerAdapter(url, partitions=4, consume=[2, 3]) as right,
    ):
        a, b = _drain(left, topic), _drain(right, topic)
    assert {e.subject for e in a}.isdisjoint({e.subject for e in b})
    assert sorted(e.id for e in a + b) == sorted(e.id for e in sent)
    for subject in {e.subject for e in sent}:
        mine = [e.data["n"] for e in a + b if e.subject == subject]
        assert mine == sorted(mine)


def test_stored_envelopes_are_routed_by_their_subject(url: str, topic: str) -> None:
    """An outbox row's envelope, parsed only when read, still goes to its subject's partition."""
    sent = [Envelope.new(type="t", subject=f"o-{n % 10}", data={"n": n}) for n in range(20)]
    stored = [Envelope.from_trusted_json(env.to_json()) for env in sent]
    with KombuBrokerAdapter(url, partitions=4) as producer:
        producer.publish_many(topic, stored[:10])
        for env in stored[10:]:
            producer.publish(topic, env)
    ours = {s for s in {e.subject for e in sent} if partition_of(s, 4) in (0, 1)}
    with KombuBrokerAdapter(url, partitions=4, consume=[0, 1]) as left:
        got = _drain(left, topic)
    assert ours
    assert {e.subject for e in got} == ours
    for subject in ours:
        assert [e.id for e in got if e.subject == subject] == [
            e.id for e in sent if e.subject == subject
        ]


def test_publish_many_keeps_order_and_checks_every_envelope_first(url: str, topic: str) -> None:
    """A batch arrives in order; one oversized envelope fails the call before any is sent."""
    with KombuBrokerAdapter(url, max_bytes=2000) as adapter:
        batch = [Envelope.new(type="t", subject="s", data={"n": n}) for n in range(30)]
        adapter.publish_many(topic, batch)
        adapter.publish_many(topic, [])
        huge = Envelope.new(type="t", subject="s", data={"blob": "x" * 5000})
        with pytest.raises(EnvelopeTooLargeError):
            adapter.publish_many(topic, [batch[0], huge])
        with pytest.raises(EnvelopeTooLargeError):
            adapter.publish(topic, huge)
        got = _drain(adapter, topic)
    assert [e.id for e in got] == [e.id for e in batch]


def test_producer_attempt_is_never_trusted(url: str, topic: str) -> None:
    """An xsmattempt or x-delivery-count written by the producer is replaced by the broker's."""
    forged = Envelope.new(type="t", subject="s").with_attempt(99)
    with KombuBrokerAdapter(url) as adapter:
        adapter.declare(topic)
        _raw_publish(url, topic, forged.to_json(), {"x-delivery-count": 50})
        [delivery] = list(adapter.subscribe(topic, timeout=1))
        delivery.ack()
    assert delivery.envelope.id == forged.id
    assert delivery.envelope.attempt == 0


def test_a_message_returned_to_the_broker_comes_back_first_and_counted(
    url: str, topic: str
) -> None:
    """Closing a consumer gives its messages back in order; the broker counts the delivery."""
    sent = [Envelope.new(type="t", subject="s", data={"n": n}) for n in range(3)]
    with KombuBrokerAdapter(url) as first:
        first.publish_many(topic, sent)
        held = [d.envelope.id for d in first.subscribe(topic, timeout=0.5)]
        assert held == [e.id for e in sent]
    with KombuBrokerAdapter(url) as second:
        got = _drain(second, topic)
    assert [e.id for e in got] == [e.id for e in sent]
    assert all(e.attempt == 1 for e in got)


def test_quorum_queue_delivery_count_survives_consumer_restarts(rabbitmq_url: str) -> None:
    """On RabbitMQ the count grows with every return, whichever consumer received it."""
    name = f"adapter-{new_id()}"
    try:
        with KombuBrokerAdapter(rabbitmq_url) as producer:
            producer.publish(name, Envelope.new(type="t", subject="s"))
        seen = []
        for _ in range(3):
            with KombuBrokerAdapter(rabbitmq_url) as consumer:
                [delivery] = list(consumer.subscribe(name, timeout=1))
                seen.append(delivery.envelope.attempt)
        assert seen == [0, 1, 2]
    finally:
        with KombuBrokerAdapter(rabbitmq_url) as cleanup:
            cleanup.delete(name)


def test_several_consumers_of_every_partition_keep_subject_order(rabbitmq_url: str) -> None:
    """RabbitMQ gives each partition queue one active consumer, so order per subject holds."""
    name = f"adapter-{new_id()}"
    try:
        with KombuBrokerAdapter(rabbitmq_url, partitions=3) as producer:
            producer.declare(name)
            sent = [Envelope.new(type="t", subject=f"o-{n % 6}", data={"n": n}) for n in range(60)]
            with (
                KombuBrokerAdapter(rabbitmq_url, partitions=3) as a,
                KombuBrokerAdapter(rabbitmq_url, partitions=3) as b,
            ):
                list(a.subscribe(name, timeout=0.2))
                list(b.subscribe(name, timeout=0.2))
                producer.publish_many(name, sent)
                got_a, got_b = _drain(a, name), _drain(b, name)
                got_a += _drain(a, name)
        assert sorted(e.id for e in got_a + got_b) == sorted(e.id for e in sent)
        assert {e.subject for e in got_a}.isdisjoint({e.subject for e in got_b})
        for subject in {e.subject for e in sent}:
            mine = [e.data["n"] for e in got_a + got_b if e.subject == subject]
            assert mine == sorted(mine)
    finally:
        with KombuBrokerAdapter(rabbitmq_url, partitions=3) as cleanup:
            cleanup.delete(name)


def test_undecodable_body_is_delivered_raw_for_the_dispatcher(url: str, topic: str) -> None:
    """Without a dead-letter store, a body that is no envelope is yielded as its raw text."""
    with KombuBrokerAdapter(url) as adapter:
        adapter.declare(topic)
        _raw_publish(url, topic, "{not json", {})
        [delivery] = list(adapter.subscribe(topic, timeout=1))
        delivery.ack()
    raw = delivery.envelope
    assert (raw.encode() if isinstance(raw, str) else bytes(raw)) == b"{not json"


def test_undecodable_body_is_dead_lettered_by_the_adapter_when_asked(url: str, topic: str) -> None:
    """With dead_letters=, a corrupt message is recorded as corrupt, acked and never yielded."""
    dlq = MemoryDeadLetterStore()
    good = Envelope.new(type="t", subject="s")
    with KombuBrokerAdapter(url, dead_letters=dlq) as adapter:
        adapter.declare(topic)
        _raw_publish(url, topic, json.dumps({"type": "t"}), {})
        adapter.publish(topic, good)
        assert [e.id for e in _drain(adapter, topic)] == [good.id]
        assert _drain(adapter, topic, timeout=0.2) == []
    [record] = dlq.list()
    assert record.reason == "corrupt"
    assert record.topic == topic
    assert "specversion" in record.errors[0]["message"]


def test_publish_survives_a_redis_restart(running_redis: PrivateRedis) -> None:
    """A publish after Redis restarted reconnects instead of failing."""
    topic = f"adapter-{new_id()}"
    with KombuBrokerAdapter(running_redis.url(5)) as adapter:
        adapter.publish(topic, Envelope.new(type="t", subject="s"))
        running_redis.restart()
        adapter.publish(topic, Envelope.new(type="t", subject="s"))
        assert len(_drain(adapter, topic)) == 2


def test_publish_to_a_dead_broker_raises_broker_publish_error(running_redis: PrivateRedis) -> None:
    """When the broker stays down, publish raises BrokerUnavailableError (an outage)."""
    with KombuBrokerAdapter(running_redis.url(5), retries=1) as adapter:
        adapter.publish("t", Envelope.new(type="t", subject="s"))
        running_redis.stop()
        with pytest.raises(BrokerUnavailableError, match="'t'") as info:
            adapter.publish("t", Envelope.new(type="t", subject="s"))
        assert is_broker_outage(info.value)
        with pytest.raises(BrokerUnavailableError, match="unreachable"):
            adapter.publish_many("t", [Envelope.new(type="t", subject="s")] * 2)


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_a_broker_never_reached_is_an_outage_not_a_refusal(scheme: str) -> None:
    """Connection refused on the first connect is BrokerUnavailableError, never a refusal."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"{scheme}://guest:guest@127.0.0.1:{port}/"
    with (
        KombuBrokerAdapter(url, retries=0) as adapter,
        pytest.raises(BrokerUnavailableError, match="unreachable") as info,
    ):
        adapter.publish("t", Envelope.new(type="t", subject="s"))
    assert is_broker_outage(info.value)


def test_a_declare_rabbitmq_refuses_is_a_refusal(rabbitmq_url: str) -> None:
    """PRECONDITION_FAILED on declare is plain BrokerPublishError: the relay counts it."""
    topic = f"adapter-{new_id()}"
    with KombuBrokerAdapter(rabbitmq_url, queue_type="classic") as classic:
        classic.declare(topic)
        try:
            with KombuBrokerAdapter(rabbitmq_url) as quorum:
                with pytest.raises(BrokerPublishError, match="PreconditionFailed") as info:
                    quorum.publish(topic, Envelope.new(type="t", subject="s"))
                assert not is_broker_outage(info.value)
                quorum.publish(f"{topic}-ok", Envelope.new(type="t", subject="s"))
                quorum.delete(f"{topic}-ok")
        finally:
            classic.delete(topic)


def test_bad_options_are_refused() -> None:
    """Prefetch and batch sizes must be positive integers."""
    with pytest.raises(ValueError, match="prefetch"):
        KombuBrokerAdapter("memory://", prefetch=0)
    with pytest.raises(ValueError, match="batch_size"):
        KombuBrokerAdapter("memory://", batch_size=-1)
