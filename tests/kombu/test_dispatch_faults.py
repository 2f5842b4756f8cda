"""The dispatcher over real brokers: poison, corrupt envelopes, and a Redis restart."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Producer

from tests.kombu.machines import STEP_TYPE, poison, recorder, seen
from tests.kombu.private_redis import PrivateRedis
from xsm_celery.eda import Envelope, InboundDispatcher, new_id
from xsm_celery.kombu import KombuBrokerAdapter, consume_forever
from xsm_celery.kombu.wire import ANONYMOUS, CONTENT_TYPE
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore
from xsm_celery.persistence import MemoryInbox, MemoryStore

pytestmark = pytest.mark.service


@pytest.fixture(params=["redis", "rabbitmq"])
def url(request: pytest.FixtureRequest) -> str:
    """The broker under test: the shared Redis (database 5) or RabbitMQ."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_db_url"))
    return str(request.getfixturevalue("rabbitmq_url"))


@pytest.fixture
def topic(url: str) -> Iterator[str]:
    """A fresh topic, deleted afterwards."""
    name = f"faults-{new_id()}"
    yield name
    with KombuBrokerAdapter(url) as cleanup:
        cleanup.delete(name)


def _step(subject: str, n: int) -> Envelope:
    return Envelope.new(type=STEP_TYPE, subject=subject, data={"n": n})


def _left(url: str, topic: str) -> int:
    """Messages still deliverable on ``topic`` (each is requeued after counting)."""
    with KombuBrokerAdapter(url) as probe:
        return len(list(probe.subscribe(topic, timeout=0.3)))


def test_poison_is_dead_lettered_and_acked_after_max_attempts(url: str, topic: str) -> None:
    """A step that always fails runs max_attempts times, then one dead letter, then acked."""
    calls: list[int] = []
    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        MemoryStore(),
        {STEP_TYPE: poison(calls)},
        inbox=MemoryInbox(),
        max_attempts=3,
        dead_letters=dlq,
    )
    with KombuBrokerAdapter(url) as broker:
        broker.publish(topic, _step("acct-1", 1))
        for _ in range(10):
            result = dispatcher.run_once_sync(broker, topic)
            if result.dead_lettered:
                break
    [record] = dlq.list()
    assert record.reason == "max_attempts"
    assert record.attempts == 3
    assert len(calls) == 3
    assert record.errors[-1]["message"] == "ledger backend rejected the entry"
    assert _left(url, topic) == 0


def test_quorum_delivery_count_dead_letters_across_consumer_restarts(rabbitmq_url: str) -> None:
    """Each attempt by a freshly started consumer still counts: RabbitMQ keeps the tally."""
    topic = f"faults-{new_id()}"
    calls: list[int] = []
    dlq = MemoryDeadLetterStore()
    try:
        with KombuBrokerAdapter(rabbitmq_url) as producer:
            producer.publish(topic, _step("acct-1", 1))
        restarts = 0
        while restarts < 6 and not dlq.list():
            restarts += 1
            dispatcher = InboundDispatcher(
                MemoryStore(), {STEP_TYPE: poison(calls)}, max_attempts=3, dead_letters=dlq
            )
            with KombuBrokerAdapter(rabbitmq_url) as consumer:
                dispatcher.run_once_sync(consumer, topic)
        assert [r.reason for r in dlq.list()] == ["max_attempts"]
        assert restarts == 3
        assert len(calls) == 3
        assert _left(rabbitmq_url, topic) == 0
    finally:
        with KombuBrokerAdapter(rabbitmq_url) as cleanup:
            cleanup.delete(topic)


def _corrupt_bodies() -> dict[str, str]:
    def nest(depth: int) -> Any:
        value: Any = "leaf"
        for _ in range(depth):
            value = {"k": value}
        return value

    base = _step("acct-1", 0).to_dict()
    return {
        "not json": "{this is not json",
        "not an object": json.dumps([1, 2, 3]),
        "oversized": json.dumps({**base, "data": {"blob": "x" * (1024 * 1024 + 10)}}),
        "deeply nested": json.dumps({**base, "id": new_id(), "data": nest(80)}),
        "credential extension": json.dumps({**base, "id": new_id(), "authorization": "Bearer x"}),
        "no subject": json.dumps(
            {k: v for k, v in {**base, "id": new_id()}.items() if k != "subject"}
        ),
        "bad traceparent": json.dumps({**base, "id": new_id(), "traceparent": "nope"}),
    }


def test_corrupt_envelopes_are_dead_lettered_as_corrupt_never_raised(url: str, topic: str) -> None:
    """Malformed, oversized, deep and credential-bearing bodies: corrupt dead letters, acked."""
    dlq = MemoryDeadLetterStore()
    store = MemoryStore()
    dispatcher = InboundDispatcher(
        store, {STEP_TYPE: recorder()}, inbox=MemoryInbox(), dead_letters=dlq
    )
    bodies = _corrupt_bodies()
    with KombuBrokerAdapter(url) as broker:
        broker.declare(topic)
        with Connection(url) as conn:
            producer = Producer(conn.default_channel)
            for body in bodies.values():
                producer.publish(
                    body,
                    routing_key=topic,
                    exchange=ANONYMOUS,
                    content_type=CONTENT_TYPE,
                    content_encoding="utf-8",
                )
        broker.publish(topic, _step("acct-1", 7))
        result = dispatcher.run_once_sync(broker, topic)
    assert result.dead_lettered == len(bodies)
    assert result.processed == 1
    assert {r.reason for r in dlq.list()} == {"corrupt"}
    assert len(dlq.list()) == len(bodies)
    assert seen(store, "acct-1") == [7]
    assert _left(url, topic) == 0


def test_dispatcher_keeps_running_through_a_redis_restart(private_redis: PrivateRedis) -> None:
    """Redis is killed mid-run and restarted: the loop survives, nothing is lost or doubled."""
    private_redis.start()
    url = private_redis.url(5)
    topic = f"faults-{new_id()}"
    options = {"visibility_timeout": 1, "unacked_restore_throttle": 1}
    store, inbox = MemoryStore(), MemoryInbox()
    slow = threading.Event()

    def pace(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        if slow.is_set():
            time.sleep(0.01)

    from xsm_celery import MachineLogic, create_machine

    machine = create_machine(
        recorder().config, logic=recorder().logic.merge(MachineLogic(actions={"pace": pace}))
    )
    machine = create_machine(
        {**machine.config, "states": {"open": {"on": {"STEP": {"actions": ["pace", "record"]}}}}},
        logic=machine.logic,
    )
    dispatcher = InboundDispatcher(store, {STEP_TYPE: machine}, inbox=inbox)
    stop = threading.Event()
    consumer = KombuBrokerAdapter(url, retries=2, transport_options=options)
    handled: list[int] = []
    loop = threading.Thread(
        target=lambda: handled.append(
            consume_forever(dispatcher, consumer, topic, stop, backoff_s=0.2)
        )
    )
    subjects = [f"acct-{k}" for k in range(5)]
    try:
        with KombuBrokerAdapter(url, transport_options=options) as producer:
            producer.publish_many(topic, [_step(subjects[n % 5], n) for n in range(100)])
            slow.set()
            loop.start()
            _wait(lambda: sum(len(seen(store, s)) for s in subjects) >= 20, 20)
            before = sum(len(seen(store, s)) for s in subjects)
            private_redis.restart(down_s=0.3)
            slow.clear()
            producer.publish_many(topic, [_step(subjects[n % 5], n) for n in range(100, 200)])
            _wait(lambda: sum(len(seen(store, s)) for s in subjects) >= 200, 30)
        assert before < 100, "the restart must hit the first batch mid-way"
        assert loop.is_alive()
        for k, subject in enumerate(subjects):
            assert sorted(seen(store, subject)) == list(range(k, 200, 5))
    finally:
        stop.set()
        loop.join(10)
        consumer.close()


def _wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)
