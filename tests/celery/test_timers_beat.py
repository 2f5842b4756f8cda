"""Durable retry timers: written instead of long countdowns, published by the Beat task."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection

from tests.celery.queues import drain_queue
from xsm_celery.celery import HEADER, ChartTask, Xsm, fire_due_timers
from xsm_celery.celery.worker.timers import FIRE_TIMERS_TASK, schedule_retry
from xsm_celery.patterns import RetryPolicy
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore


@pytest.fixture
def app(tmp_path: Path, redis_url: str) -> Iterator[Celery]:
    """An app on the local Redis with its own queue, timer file and a 1 s countdown limit."""
    celery_app = Celery("timers", set_as_current=False)
    celery_app.conf.update(
        broker_url=redis_url,
        task_default_queue=f"xsm-timers-{uuid.uuid4().hex[:8]}",
        xsm_timer_store=f"sqlite:///{tmp_path / 'timers.db'}",
        xsm_dead_letter_store="memory://timers",
        xsm_timer_countdown_max_s=1,
    )
    yield celery_app
    with Connection(redis_url) as conn:
        conn.default_channel.queue_delete(celery_app.conf.task_default_queue)
    celery_app.close()


def timers(app: Celery) -> SQLAlchemyTimerStore:
    """The app's timer store."""
    return SQLAlchemyTimerStore(app.conf.xsm_timer_store)


def schedule(app: Celery, task_id: str, due_at: float) -> None:
    """A retry of shop.charge(1, amount=2) due at ``due_at``."""
    schedule_retry(
        app,
        task_name="shop.charge",
        task_id=task_id,
        args=[1],
        kwargs={"amount": 2},
        headers={HEADER: '{"context": {"attempt": 1}}'},
        retries=1,
        due_at=due_at,
        options={},
    )


def test_a_long_delay_becomes_a_timer_row_and_a_retry_state(app: Celery) -> None:
    """A 2.5 s delay over the 1 s limit: RETRY, no message, one row holding the snapshot."""

    @app.task(shared=False, base=ChartTask, retry_policy=RetryPolicy(base_ms=2500, jitter="none"))
    def charge(order: int) -> None:
        raise ConnectionError("later")

    before = time.time()
    result = charge.apply((7,))
    assert result.state == "RETRY"
    (row,) = timers(app).due(now=before + 10)
    assert row.key == result.id
    assert before + 2.5 <= row.due_at <= time.time() + 2.5
    assert row.payload["args"] == [7]
    assert row.payload["retries"] == 1
    assert json.loads(row.payload["headers"][HEADER])["context"]["attempt"] == 1


def test_due_timers_are_published_with_the_same_id_and_header(app: Celery) -> None:
    """The Beat task sends the retry: same task id, args, header and retry count; row deleted."""
    now = time.time()
    schedule(app, "task-1", now - 1)
    schedule(app, "task-2", now + 3600)
    assert fire_due_timers(app, now=now) == 1
    (message,) = drain_queue(app)
    assert message.headers["id"] == "task-1"
    assert message.headers["task"] == "shop.charge"
    assert message.headers["retries"] == 1
    assert message.headers[HEADER] == '{"context": {"attempt": 1}}'
    assert message.decode()[0] == [1]
    assert [t.key for t in timers(app).due(now=now + 7200)] == ["task-2"]


def test_nothing_is_published_before_it_is_due(app: Celery) -> None:
    """A tick before the due time publishes nothing and keeps the row."""
    now = time.time()
    schedule(app, "task-1", now + 60)
    assert fire_due_timers(app, now=now) == 0
    assert drain_queue(app) == []
    assert len(timers(app).due(now=now + 61)) == 1


def test_a_beat_that_died_after_claiming_loses_nothing(app: Celery) -> None:
    """Rows claimed by a Beat that crashed before publishing are sent once its lease runs out."""
    now = time.time()
    schedule(app, "task-1", now - 1)
    assert len(timers(app).claim(now, 10, "dead-beat", lease_s=30)) == 1
    assert fire_due_timers(app, now=now, owner="new-beat") == 0
    assert fire_due_timers(app, now=now + 31, owner="new-beat") == 1
    assert [m.headers["id"] for m in drain_queue(app)] == ["task-1"]


def test_a_failed_publish_keeps_the_row_for_a_later_tick(tmp_path: Path) -> None:
    """With the broker unreachable the row stays; nothing is deleted before it is sent."""
    app = Celery("down", set_as_current=False)
    app.conf.update(
        broker_url="redis://127.0.0.1:1/0",
        broker_connection_retry=False,
        broker_connection_max_retries=0,
        broker_transport_options={"max_retries": 0},
        xsm_timer_store=f"sqlite:///{tmp_path / 'timers.db'}",
    )
    schedule(app, "task-1", time.time() - 1)
    assert fire_due_timers(app, owner="beat") == 0
    assert len(timers(app).due(now=time.time())) == 1


def test_beat_schedule_gives_the_timer_and_relay_entries(app: Celery) -> None:
    """beat_schedule names the timer task and, when asked, the outbox relay task."""
    xsm = Xsm(app)
    assert xsm.beat_schedule() == {
        "xsm-fire-timers": {
            "task": FIRE_TIMERS_TASK,
            "schedule": 10.0,
            "options": {"expires": 10.0},
        }
    }
    both = xsm.beat_schedule(relay_every=5, timers_every=2)
    assert both["xsm-relay-outbox"] == {
        "task": "xsm_celery.relay_outbox",
        "schedule": 5.0,
        "options": {"expires": 5.0},
    }
    assert both["xsm-fire-timers"]["schedule"] == 2.0
    assert xsm.beat_schedule(timers_every=None) == {}
    with pytest.raises(ValueError, match="timers_every"):
        xsm.beat_schedule(timers_every=0)


def test_the_beat_task_is_registered_on_every_app(app: Celery) -> None:
    """xsm_celery.fire_timers exists on any app once xsm_celery.celery is imported."""
    assert FIRE_TIMERS_TASK in app.tasks
