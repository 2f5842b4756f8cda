"""The dispatcher as a consumer step inside a real (in-process) Celery worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

from tests.kombu.machines import STEP_TYPE, poison, recorder, seen
from xsm_celery.celery.worker.consumer import DispatcherStep, install_dispatcher
from xsm_celery.eda import Envelope, InboundDispatcher, new_id
from xsm_celery.kombu import KombuBrokerAdapter
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore
from xsm_celery.persistence import MemoryInbox, MemoryStore

pytestmark = pytest.mark.service


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_url(request: pytest.FixtureRequest) -> str:
    """The worker's broker: the shared Redis (database 5) or RabbitMQ."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url")).rsplit("/", 1)[0] + "/5"
    return str(request.getfixturevalue("rabbitmq_url"))


@pytest.fixture
def topic(broker_url: str) -> Iterator[str]:
    """A fresh topic, deleted afterwards."""
    name = f"consumer-{new_id()}"
    yield name
    for partitions in (1, 2):
        with KombuBrokerAdapter(broker_url, partitions=partitions) as cleanup:
            cleanup.delete(name)


@pytest.fixture
def apps() -> Iterator[list[Celery]]:
    """Apps made by a test; their task queues are deleted afterwards."""
    made: list[Celery] = []
    yield made
    for app in made:
        name = app.conf.task_default_queue
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(name)
            client = getattr(conn.default_channel, "client", None)
            if client is not None:
                keys = list(client.scan_iter(match=f"*{name}*"))
                if keys:
                    client.delete(*keys)


def _app(broker_url: str, apps: list[Celery], dlq_url: str = "memory://consumer-tests") -> Celery:
    app = Celery(f"consumer-tests-{new_id()}", broker=broker_url, set_as_current=False)
    app.conf.xsm_dead_letter_store = dlq_url
    app.conf.task_default_queue = f"consumer-tasks-{new_id()}"
    app.conf.broker_connection_retry_on_startup = True
    apps.append(app)
    return app


def _wait(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.05)


def _publish(url: str, topic: str, envelopes: list[Envelope], partitions: int = 1) -> None:
    with KombuBrokerAdapter(url, partitions=partitions) as producer:
        producer.publish_many(topic, envelopes)


def test_step_dispatches_envelopes_beside_ordinary_tasks(
    broker_url: str, topic: str, apps: list[Celery]
) -> None:
    """Envelopes reach their instances in order while the same worker runs plain tasks."""
    app = _app(broker_url, apps)
    ran: list[int] = []
    done = threading.Event()

    @app.task(name=f"consumer_tests.add.{new_id()}")
    def add(x: int, y: int) -> int:
        ran.append(x + y)
        if len(ran) == 3:
            done.set()
        return x + y

    store = MemoryStore()
    built: list[InboundDispatcher] = []

    def factory() -> InboundDispatcher:
        built.append(InboundDispatcher(store, {STEP_TYPE: recorder()}, inbox=MemoryInbox()))
        return built[-1]

    step = install_dispatcher(app, factory, topic, partitions=2, allow_memory_dead_letters=True)
    assert issubclass(step, DispatcherStep)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        _publish(broker_url, topic, [_step(f"acct-{n % 3}", n) for n in range(30)], partitions=2)
        for n in range(3):
            add.delay(n, 1)
        _wait(lambda: sum(len(seen(store, f"acct-{k}")) for k in range(3)) == 30)
        assert done.wait(20)
    assert len(built) == 1
    assert sorted(ran) == [1, 2, 3]
    for k in range(3):
        assert seen(store, f"acct-{k}") == list(range(k, 30, 3))


def _step(subject: str, n: int) -> Envelope:
    return Envelope.new(type=STEP_TYPE, subject=subject, data={"n": n})


def test_failing_delivery_is_retried_by_the_timer_then_dead_lettered(
    broker_url: str, topic: str, apps: list[Celery]
) -> None:
    """A poison envelope is retried on the step's timer and dead-lettered at max_attempts."""
    app = _app(broker_url, apps)
    calls: list[int] = []
    dlq = MemoryDeadLetterStore()

    def factory() -> InboundDispatcher:
        return InboundDispatcher(
            MemoryStore(), {STEP_TYPE: poison(calls)}, max_attempts=3, dead_letters=dlq
        )

    install_dispatcher(app, factory, topic, retry_s=0.2, allow_memory_dead_letters=True)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        _publish(broker_url, topic, [_step("acct-1", 1)])
        _wait(lambda: bool(dlq.list()))
    [record] = dlq.list()
    assert record.reason == "max_attempts"
    assert len(calls) == 3
    with KombuBrokerAdapter(broker_url) as probe:
        assert list(probe.subscribe(topic, timeout=0.3)) == []


def test_corrupt_body_is_dead_lettered_by_the_dispatcher(
    broker_url: str, topic: str, apps: list[Celery]
) -> None:
    """A body that is not an envelope ends as a corrupt dead letter; the next one runs."""
    from kombu import Connection, Producer

    from xsm_celery.kombu.wire import ANONYMOUS, CONTENT_TYPE

    app = _app(broker_url, apps)
    dlq = MemoryDeadLetterStore()
    store = MemoryStore()
    install_dispatcher(
        app,
        lambda: InboundDispatcher(store, {STEP_TYPE: recorder()}, dead_letters=dlq),
        topic,
        allow_memory_dead_letters=True,
    )
    with KombuBrokerAdapter(broker_url) as setup:
        setup.declare(topic)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        with Connection(broker_url) as conn:
            Producer(conn.default_channel).publish(
                "{broken",
                routing_key=topic,
                exchange=ANONYMOUS,
                content_type=CONTENT_TYPE,
                content_encoding="utf-8",
            )
        _publish(broker_url, topic, [_step("acct-1", 5)])
        _wait(lambda: seen(store, "acct-1") == [5] and bool(dlq.list()))
    assert [r.reason for r in dlq.list()] == ["corrupt"]


def test_install_dispatcher_refuses_bad_arguments() -> None:
    """No topic, or a non-positive retry pause, is refused at install time."""
    app = Celery("consumer-bad-args", broker="memory://", set_as_current=False)
    with pytest.raises(ValueError, match="topic"):
        install_dispatcher(app, lambda: None, [])
    with pytest.raises(ValueError, match="retry_s"):
        install_dispatcher(app, lambda: None, "t", retry_s=0)


def test_a_dispatcher_without_a_store_dead_letters_into_the_apps_store(
    broker_url: str, topic: str, apps: list[Celery], tmp_path: Any
) -> None:
    """The step hands a dispatcher built without ``dead_letters=`` the app's configured store."""
    from xsm_celery.sqlalchemy import open_dead_letter_store

    url = f"sqlite:///{tmp_path / 'dlq.db'}"
    app = _app(broker_url, apps, dlq_url=url)
    calls: list[int] = []
    install_dispatcher(
        app,
        lambda: InboundDispatcher(MemoryStore(), {STEP_TYPE: poison(calls)}, max_attempts=1),
        topic,
        retry_s=0.2,
    )
    store = open_dead_letter_store(url)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        _publish(broker_url, topic, [_step("acct-1", 1)])
        _wait(lambda: bool(store.list()))
    assert [r.reason for r in store.list()] == ["max_attempts"]


def test_a_memory_store_is_refused_in_a_worker_unless_asked_for() -> None:
    """A memory store (given or configured) is refused unless explicitly allowed."""
    from xsm_celery.celery.worker.consumer_dead_letters import adopt_app_dead_letters
    from xsm_celery.errors import ConfigurationError

    app = Celery("consumer-memory", set_as_current=False)
    app.conf.xsm_dead_letter_store = "memory://consumer-memory"
    defaulted = InboundDispatcher(MemoryStore(), {STEP_TYPE: recorder()})
    with pytest.raises(ConfigurationError, match="allow_memory_dead_letters=True"):
        adopt_app_dead_letters(defaulted, app, allow_memory=False)
    given = InboundDispatcher(
        MemoryStore(), {STEP_TYPE: recorder()}, dead_letters=MemoryDeadLetterStore()
    )
    with pytest.raises(ConfigurationError, match="neither the admin nor the CLI"):
        adopt_app_dead_letters(given, app, allow_memory=False)
    assert adopt_app_dead_letters(given, app, allow_memory=True) is given.dead_letters
