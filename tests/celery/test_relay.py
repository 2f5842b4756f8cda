"""The outbox relay as the Celery task ``xsm_celery.relay_outbox``, and several at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from xsm_celery.celery import RELAY_OUTBOX_TASK, Xsm
from xsm_celery.celery.worker.relay import install_relay, relay_for, relay_outbox, relay_pending
from xsm_celery.eda import Envelope, MemoryOutboxStore, SyncFakeBrokerAdapter, new_id
from xsm_celery.errors import BrokerPublishError, ConfigurationError
from xsm_celery.kombu import KombuBrokerAdapter
from xsm_celery.sqlalchemy import SQLAlchemyOutboxStore


def _app(name: str = "relay-tests") -> Celery:
    app = Celery(name, broker="memory://", set_as_current=False)
    app.conf.task_always_eager = True
    return app


def _envs(n: int, subject: str = "o") -> list[Envelope]:
    return [
        Envelope.new(type="order.paid", subject=f"{subject}-{i}", data={"n": i}) for i in range(n)
    ]


@pytest.fixture
def redis_events(redis_url: str) -> Iterator[tuple[str, str]]:
    """A Redis URL (database 5) and a fresh topic, deleted afterwards."""
    url = redis_url.rsplit("/", 1)[0] + "/5"
    topic = f"relay-{new_id()}"
    yield url, topic
    with KombuBrokerAdapter(url) as cleanup:
        cleanup.delete(topic)


def test_beat_schedule_points_at_the_registered_task() -> None:
    """Xsm.beat_schedule(relay_every=...) names the task this module registers."""
    app = _app()
    entry = Xsm(app).beat_schedule(relay_every=5)["xsm-relay-outbox"]
    assert entry == {"task": RELAY_OUTBOX_TASK, "schedule": 5.0, "options": {"expires": 5.0}}
    assert RELAY_OUTBOX_TASK in app.tasks
    assert relay_outbox.name == RELAY_OUTBOX_TASK


def test_task_relays_every_pending_row_in_order() -> None:
    """One task run drains the outbox in batches and marks every row sent."""
    app = _app()
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    sent = _envs(23)
    for env in sent:
        outbox.add("orders", env)
    install_relay(app, outbox, broker=broker, batch=5)
    result = app.tasks[RELAY_OUTBOX_TASK].apply()
    assert result.get() == 23
    assert [e.id for e in broker.published_on("orders")] == [e.id for e in sent]
    assert outbox.count(pending_only=True) == 0


def test_failed_publish_keeps_rows_for_the_next_run() -> None:
    """A broker failure fails the run; the unsent rows are released, not lost."""
    app = _app()
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    for env in _envs(4):
        outbox.add("orders", env)
    install_relay(app, outbox, broker=broker, batch=10)
    broker.fail_next_publish()
    with pytest.raises(Exception, match="injected"):
        relay_pending(app)
    assert outbox.count(pending_only=True) == 4
    assert relay_pending(app) == 4


def test_max_attempts_sets_a_refused_row_aside_and_the_run_goes_on() -> None:
    """install_relay(max_attempts=...) reaches the relay: a refused row is failed, the rest sent."""
    app = _app()
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    sent = _envs(3)
    for env in sent:
        outbox.add("orders", env)
    install_relay(app, outbox, broker=broker, max_attempts=1)
    broker.fail_next_publish(BrokerPublishError("the broker refused the message"))
    assert relay_pending(app) == 2
    assert [e.id for e in broker.published_on("orders")] == [e.id for e in sent[1:]]
    assert [f.envelope.id for f in outbox.failed()] == [sent[0].id]
    with pytest.raises(ConfigurationError, match="max_attempts"):
        install_relay(app, outbox, broker=broker, max_attempts=0)


def test_max_batches_bounds_one_run() -> None:
    """A run publishes at most max_batches batches and leaves the rest to the next tick."""
    app = _app()
    outbox, broker = MemoryOutboxStore(), SyncFakeBrokerAdapter()
    for env in _envs(10):
        outbox.add("orders", env)
    install_relay(app, outbox, broker=broker, batch=3, max_batches=2)
    assert relay_pending(app) == 6
    assert outbox.count(pending_only=True) == 4


def test_settings_configure_outbox_url_and_broker(
    tmp_path: Path, redis_events: tuple[str, str]
) -> None:
    """xsm_outbox_store as a URL and the app's own Redis broker: rows reach real Redis."""
    url, topic = redis_events
    db = f"sqlite:///{tmp_path / 'outbox.db'}"
    writer = SQLAlchemyOutboxStore(db)
    sent = _envs(7)
    writer.add_many([(topic, env) for env in sent])
    app = Celery("relay-settings", broker=url, set_as_current=False)
    app.conf.xsm_outbox_store = db
    app.conf.xsm_relay_batch = 3
    assert relay_pending(app) == 7
    assert writer.count(pending_only=True) == 0
    with KombuBrokerAdapter(url) as consumer:
        got = list(consumer.subscribe(topic, timeout=1))
        for delivery in got:
            delivery.ack()
    assert sorted(d.envelope.id for d in got) == sorted(e.id for e in sent)


def test_missing_outbox_and_bad_options_are_refused() -> None:
    """No outbox configured, or a nonsense option, is a ConfigurationError naming the fix."""
    with pytest.raises(ConfigurationError, match="install_relay"):
        relay_for(_app())
    with pytest.raises(ConfigurationError, match="batch"):
        install_relay(_app(), MemoryOutboxStore(), batch=0)
    with pytest.raises(ConfigurationError, match="unknown option"):
        install_relay(_app(), MemoryOutboxStore(), batchsize=3)


def test_several_relays_at_once_publish_each_row_once(
    tmp_path: Path, redis_events: tuple[str, str]
) -> None:
    """Four workers' relays drain one SQLite outbox concurrently: no row goes out twice."""
    url, topic = redis_events
    db = f"sqlite:///{tmp_path / 'outbox.db'}"
    writer = SQLAlchemyOutboxStore(db)
    sent = _envs(400)
    writer.add_many([(topic, env) for env in sent])
    apps = [_app(f"worker-{i}") for i in range(4)]
    for i, app in enumerate(apps):
        install_relay(app, SQLAlchemyOutboxStore(db), broker=url, batch=25, owner=f"w{i}")
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda a=app: counts.append(relay_pending(a))) for app in apps
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(counts) == 400
    got: list[str] = []
    with KombuBrokerAdapter(url) as consumer:
        for delivery in consumer.subscribe(topic, timeout=1):
            got.append(delivery.envelope.id)
            delivery.ack()
    assert sorted(got) == sorted(e.id for e in sent)


def test_a_worker_runs_the_relay_task_sent_by_name(
    tmp_path: Path, redis_events: tuple[str, str]
) -> None:
    """Beat sends the task by name; a real (in-process) worker relays the outbox."""
    from celery.contrib.testing.worker import start_worker

    url, topic = redis_events
    app = Celery(f"relay-worker-{new_id()}", broker=url, set_as_current=False)
    app.conf.task_default_queue = f"relay-tasks-{new_id()}"
    outbox = SQLAlchemyOutboxStore(f"sqlite:///{tmp_path / 'outbox.db'}")
    sent = _envs(12)
    outbox.add_many([(topic, env) for env in sent])
    install_relay(app, outbox, batch=5)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            app.send_task(RELAY_OUTBOX_TASK)
            deadline = time.monotonic() + 20
            while outbox.count(pending_only=True) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert outbox.count(pending_only=True) == 0
        got: list[str] = []
        with KombuBrokerAdapter(url) as consumer:
            for delivery in consumer.subscribe(topic, timeout=1):
                got.append(delivery.envelope.id)
                delivery.ack()
        assert got == [e.id for e in sent]
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(app.conf.task_default_queue)
            client = conn.default_channel.client
            keys = list(client.scan_iter(match=f"*{app.conf.task_default_queue}*"))
            if keys:
                client.delete(*keys)
