"""Queue lengths from real brokers, the queues an app routes to, and the workers-up memory."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from hypothesis import given, settings
from hypothesis import strategies as st
from kombu import Queue
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from xsm_celery.metrics.queues import QueueLengthCollector, app_queues, read_queue_lengths
from xsm_celery.metrics.workers import WorkerCollector

pytestmark = pytest.mark.service


def _app(broker: str) -> Celery:
    app = Celery("xsm_queue_tests", broker=broker)
    app.conf.broker_connection_retry_on_startup = True
    return app


@pytest.fixture
def parked(redis_url: str) -> Iterator[tuple[Celery, str]]:
    """A Redis app with 4 messages waiting in a fresh queue."""
    app = _app(redis_url.rsplit("/", 1)[0] + "/11")
    queue = f"xsm-len-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as conn:
        for _ in range(4):
            app.send_task("len.noop", queue=queue, connection=conn)
    yield app, queue
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)
    app.close()


def test_redis_lengths_count_waiting_messages_and_read_0_for_an_empty_queue(
    parked: tuple[Celery, str],
) -> None:
    """LLEN through a passive declare: 4 waiting, and a queue with no key is empty."""
    app, queue = parked
    empty = f"{queue}-empty"
    assert read_queue_lengths(app, [queue, empty]) == {queue: (4, None), empty: (0, None)}


def test_rabbitmq_lengths_leave_out_a_queue_that_does_not_exist(rabbitmq_url: str) -> None:
    """RabbitMQ reports messages and consumers; a missing queue is absent, not 0."""
    app = _app(rabbitmq_url)
    name = f"xsm-len-{uuid.uuid4().hex[:8]}"
    try:
        with app.connection_for_write() as conn:
            Queue(name)(conn.default_channel).declare()
            for _ in range(2):
                app.send_task("len.noop", queue=name, connection=conn)
        lengths = read_queue_lengths(app, [f"{name}-missing", name, f"{name}-gone"])
        assert lengths == {name: (2, 0)}
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(name)
        app.close()


@pytest.mark.filterwarnings("ignore::celery.exceptions.CDeprecationWarning")
def test_app_queues_reads_defaults_declared_queues_routes_and_task_options() -> None:
    """Every statically known destination of the app's messages is measured."""
    app = Celery("xsm_route_tests")
    app.conf.task_default_queue = "default-q"
    app.conf.task_queues = [Queue("declared-q")]
    app.conf.task_routes = [{"a.*": {"queue": "routed-q"}}, {"b.x": {"queue": Queue("obj-q")}}]

    @app.task(name="c.task", queue="option-q", shared=False)
    def task() -> None:
        """Routed by its own option."""

    assert app_queues(app) == ["declared-q", "default-q", "obj-q", "option-q", "routed-q"]


def test_a_broker_that_is_down_leaves_the_queue_gauge_out() -> None:
    """No broker: the scrape still works and has no celery_queue_length at all."""
    registry = CollectorRegistry()
    registry.register(QueueLengthCollector(_app("redis://127.0.0.1:1/0"), ["q"]))
    from prometheus_client import generate_latest

    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    assert [f.name for f in families] == []


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 400), st.sets(st.sampled_from(["w1@h", "w2@h", "w3@h"]))),
        max_size=12,
    )
)
def test_up_is_the_last_answer_and_silence_past_the_limit_forgets(
    pings: list[tuple[float, set[str]]],
) -> None:
    """After any ping sequence: listed = answered within the limit; up = answered last."""
    now = [0.0]
    workers = WorkerCollector(Celery("unused"), forget_after_s=600, clock=lambda: now[0])
    last: dict[str, float] = {}
    state: dict[str, bool] = {}
    for step, answered in pings:
        now[0] += step
        last.update(dict.fromkeys(answered, now[0]))
        state = workers.observe(answered)
    if pings:
        listed = {name for name, seen in last.items() if now[0] - seen <= 600}
        assert set(state) == listed
        assert {name for name, up in state.items() if up} == pings[-1][1]
