"""replay_task: dry run by default, audited, refused when it cannot reproduce the call."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tests.celery.queues import drain_queue
from xsm_celery.celery import HEADER, ChartTask, replay_task
from xsm_celery.errors import ReplayRefusedError
from xsm_celery.patterns import DeadLetter, RetryPolicy
from xsm_celery.sqlalchemy.urls import open_dead_letter_store


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app on the in-memory broker with a failing chart task and its own store."""
    celery_app = Celery("replay", set_as_current=False)
    celery_app.conf.update(
        broker_url="memory://",
        task_default_queue=f"replay-{uuid.uuid4().hex[:6]}",
        xsm_dead_letter_store=f"memory://{uuid.uuid4().hex}",
    )

    @celery_app.task(
        shared=False,
        base=ChartTask,
        name="billing.charge",
        retry_policy=RetryPolicy(max_attempts=1),
    )
    def charge(order_id: str, amount: int) -> None:
        raise ConnectionError("gateway down")

    yield celery_app
    celery_app.close()


def store(app: Celery) -> Any:
    """The app's dead-letter store."""
    return open_dead_letter_store(app.conf.xsm_dead_letter_store)


def dead_letter(app: Celery, *args: Any, **kwargs: Any) -> DeadLetter:
    """Run billing.charge eagerly until it dead-letters; return the record."""
    result = app.tasks["billing.charge"].apply(args, kwargs)
    return next(r for r in store(app).all() if r.task_id == result.id)


def test_a_dry_run_changes_nothing(app: Celery) -> None:
    """The default dry run reports the call and sends, resolves and audits nothing."""
    record = dead_letter(app, "o-1", 5)
    result = replay_task(store(app), record.id, app)
    assert result.dry_run
    assert result.task_id is None
    assert "would send billing.charge" in result.outcome
    assert result.args == ["o-1", 5]
    assert drain_queue(app, timeout=0.05) == []
    assert store(app).get(record.id).resolved_at is None
    assert store(app).audit_log(record.id) == []


def test_a_real_replay_sends_a_fresh_chart_resolves_and_audits(app: Celery) -> None:
    """The task goes out with its arguments, a new id and no chart header; the record is closed."""
    record = dead_letter(app, "o-2", amount=9)
    result = replay_task(
        store(app), record.id, app, reason="gateway fixed", dry_run=False, actor="ana"
    )
    (message,) = drain_queue(app, timeout=0.05)
    assert message.headers["id"] == result.task_id != record.task_id
    assert message.headers["task"] == "billing.charge"
    assert HEADER not in message.headers
    assert list(message.decode()[:2]) == [["o-2"], {"amount": 9}]
    assert store(app).get(record.id).resolved_at is not None
    (audit,) = store(app).audit_log(record.id)
    assert (audit["action"], audit["actor"], audit["reason"]) == ("replay", "ana", "gateway fixed")
    assert result.task_id in audit["outcome"]


def test_a_real_replay_needs_a_reason(app: Celery) -> None:
    """No reason, no replay: the audit trail must say why."""
    record = dead_letter(app, "o-3", 1)
    with pytest.raises(ReplayRefusedError, match="needs a reason"):
        replay_task(store(app), record.id, app, reason="  ", dry_run=False)
    assert drain_queue(app, timeout=0.05) == []


def test_a_resolved_record_is_not_sent_twice(app: Celery) -> None:
    """Once replayed (resolved), a second replay is refused."""
    record = dead_letter(app, "o-4", 1)
    replay_task(store(app), record.id, app, reason="first", dry_run=False)
    with pytest.raises(ReplayRefusedError, match="already resolved"):
        replay_task(store(app), record.id, app, reason="again", dry_run=False)
    assert len(drain_queue(app, timeout=0.05)) == 1


def test_unknown_ids_and_foreign_records_are_refused(app: Celery) -> None:
    """An id that is not there, and a record no task wrote, are both refused."""
    with pytest.raises(ReplayRefusedError, match="no dead letter"):
        replay_task(store(app), "nope", app)
    foreign = DeadLetter("job", "job.dead", {"type": "E"}, 1, [], {}, time.time())
    store(app).put(foreign)
    with pytest.raises(ReplayRefusedError, match="not written by a Celery task"):
        replay_task(store(app), foreign.id, app)


def test_redacted_arguments_are_refused(app: Celery) -> None:
    """A record whose arguments were masked cannot reproduce the call."""

    @app.task(
        shared=False, base=ChartTask, name="shop.pay", retry_policy=RetryPolicy(max_attempts=1)
    )
    def pay(order_id: str, card_token: str) -> None:
        raise ConnectionError("declined")

    result = pay.apply(("o-5", "tok_live_1"))
    record = next(r for r in store(app).all() if r.task_id == result.id)
    assert record.task_args == ["o-5", "***"]
    with pytest.raises(ReplayRefusedError, match=r"args\[1\]"):
        replay_task(store(app), record.id, app)


def test_warnings_name_an_unknown_task_and_a_changed_chart(app: Celery) -> None:
    """The result warns when the app does not know the task, or its chart changed since."""
    record = dead_letter(app, "o-6", 1)
    other = Celery("elsewhere", set_as_current=False)
    assert "not registered" in replay_task(store(app), record.id, other).warnings[0]
    changed = DeadLetter(**{**record.to_dict(), "id": "x-1", "machine_hash": "0000"})
    store(app).put(changed)
    assert "chart changed" in replay_task(store(app), "x-1", app).warnings[0]
