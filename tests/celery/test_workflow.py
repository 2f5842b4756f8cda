"""Workflow steps in this process, on real stores (SQLite, PostgreSQL) and a real Redis broker.

No worker runs here: messages the steps publish are counted on their Redis queue, which is
unique per test, and completions are fed back as the worker's link callback would.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from celery import Celery

from tests.celery.workflow_charts import order_machine
from tests.celery.workflow_support import captured_facts, private_schema
from xsm_celery.celery import Workflow, Xsm, fire_due_timers
from xsm_celery.celery.workflow.context import StepContext
from xsm_celery.celery.workflow.step import Message
from xsm_celery.errors import InvalidEventError, WorkflowStepError
from xsm_celery.hooks import FactKind

BROKER_DB = 13


@pytest.fixture
def broker(redis_url: str) -> Iterator[tuple[str, redis_lib.Redis]]:
    """A Redis broker URL and a client on its database."""
    url = f"{redis_url.rstrip('/').rsplit('/', 1)[0]}/{BROKER_DB}"
    client = redis_lib.Redis.from_url(url)
    yield url, client
    client.close()


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A workflow store: a SQLite file, a private PostgreSQL schema, or PgBouncer's database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'workflows.db'}"
        return
    if request.param == "pgbouncer":
        yield request.getfixturevalue("pgbouncer_url")
        return
    postgres_url = request.getfixturevalue("postgres_url")
    with private_schema(postgres_url) as url:
        yield url


@pytest.fixture
def app(broker: tuple[str, redis_lib.Redis]) -> Iterator[Celery]:
    """A producer app on a fresh queue, with short countdown timers."""
    queue = f"xsm-wf-{uuid.uuid4().hex[:8]}"
    celery = Celery(f"wf-{queue}", broker=broker[0])
    celery.conf.task_default_queue = queue
    celery.conf.xsm_timer_countdown_max_s = 5.0
    celery.conf.xsm_dead_letter_store = f"memory://{queue}"
    yield celery
    broker[1].delete(queue)
    celery.close()


def _queued(app: Celery, client: redis_lib.Redis) -> list[dict[str, Any]]:
    """The task messages waiting on the app's queue, oldest first."""
    raw = client.lrange(app.conf.task_default_queue, 0, -1)
    return [json.loads(item) for item in reversed(raw)]


def _workflow(app: Celery, store: Any, **options: Any) -> Workflow:
    @app.task(name=f"{app.main}.charge")
    def charge(amount: int) -> dict[str, int]:
        return {"charged": amount}

    return Xsm(app).workflow(order_machine(charge), store=store, **options)


def test_start_creates_an_instance_with_its_timer(app: Celery, store_url: str) -> None:
    """start() runs the entry, saves version 1 and records the pending payment timeout."""
    orders = _workflow(app, store_url)
    assert orders.get("o-1") is None
    view = orders.start("o-1")
    assert view.value == "created"
    assert view.state_ids == {"order.created"}
    assert view.status == "running"
    assert view.version == 1
    assert [t.event_type for t in view.timers] == ["after.payment_timeout.order.created"]
    assert view.timers[0].due_at == pytest.approx(time.time() + 60, abs=5)
    assert orders.keys() == ["o-1"]


def test_send_publishes_one_task_message_for_the_event(
    app: Celery, broker: tuple[str, redis_lib.Redis]
) -> None:
    """send() returns the AsyncResult of a step message carrying the key and the event."""
    orders = _workflow(app, "memory://")
    result = orders.send("o-2", "PAY", total=99, event_id="evt-1")
    [message] = _queued(app, broker[1])
    assert message["headers"]["task"] == "xsm.workflow.order"
    assert message["headers"]["id"] == result.id
    args = json.loads(base64.b64decode(message["body"]))[0]
    assert args == [
        "o-2",
        {"id": "evt-1", "kind": "event", "type": "PAY", "payload": {"total": 99}},
    ]
    assert orders.get("o-2") is None


def test_engine_event_names_are_refused(app: Celery) -> None:
    """Completions and timers cannot be forged from send() or send_now()."""
    orders = _workflow(app, "memory://")
    for name in ("done.invoke.charge", "error.platform.charge", "after.1.order.created"):
        with pytest.raises(InvalidEventError, match="reserved for the engine"):
            orders.send("o-3", name)
        with pytest.raises(InvalidEventError, match="reserved for the engine"):
            orders.send_now("o-3", name)
    with pytest.raises(InvalidEventError, match="JSON"):
        orders.send("o-3", "PAY", total=object())


def test_an_event_for_an_unknown_key_starts_the_instance(app: Celery, store_url: str) -> None:
    """send_now() on a new key starts it, then applies the event in the same step."""
    orders = _workflow(app, store_url)
    view = orders.send_now("o-4", "NOTE")
    assert view.value == "created"
    assert view.context["events"] == 1
    assert view.version == 1


def test_a_redelivered_event_id_is_applied_once(app: Celery, store_url: str) -> None:
    """The second step with the same event id is answered from the inbox."""
    orders = _workflow(app, store_url)
    orders.start("o-5")
    first = orders.step("o-5", Message("same-id", "event", type="NOTE"))
    second = orders.step("o-5", Message("same-id", "event", type="NOTE"))
    assert (first.outcome, second.outcome) == ("applied", "duplicate")
    view = orders.get("o-5")
    assert view is not None
    assert view.context["events"] == 1
    assert view.version == 2


def test_a_failing_action_saves_nothing(app: Celery, store_url: str) -> None:
    """An action error aborts the step: no new version, no inbox receipt."""
    orders = _workflow(app, store_url)
    orders.start("o-6")
    with pytest.raises(WorkflowStepError, match="warehouse API is down") as caught:
        orders.send_now("o-6", "BOOM", event_id="boom-1")
    assert isinstance(caught.value.__cause__, RuntimeError)
    view = orders.get("o-6")
    assert view is not None
    assert view.version == 1
    assert orders.stores().inbox.get("order:o-6", "boom-1") is None


def test_the_task_step_is_dispatched_after_commit_and_completes(
    app: Celery, broker: tuple[str, redis_lib.Redis], store_url: str
) -> None:
    """PAY commits, then sends charge with a link back; its result moves the order to paid."""
    orders = _workflow(app, store_url, outbox_topic="orders")
    orders.start("o-7")
    view = orders.send_now("o-7", "PAY", total=42)
    assert view.value == "charging"
    [task_id] = view.waiting_for.values()
    [message] = _queued(app, broker[1])
    assert message["headers"]["task"] == f"{app.main}.charge"
    assert message["headers"]["id"] == task_id
    assert message["headers"]["xsm_workflow"] == {"workflow": "order", "key": "o-7"}
    body = json.loads(base64.b64decode(message["body"]))
    assert body[1] == {"amount": 42}
    [link] = body[2]["callbacks"]
    assert link["task"] == "xsm.workflow.order"
    # The task step's row stays until its completion is applied (the broker may lose it).
    rows = [t for t in orders.stores().timers.due(time.time() + 3600) if t.key == task_id]
    assert len(rows) == 1
    assert rows[0].due_at > time.time() + 60
    assert orders.stores().outbox.count(pending_only=True) == 1
    done = Message.from_dict({**link["args"][1], "data": {"charged": 42}})
    outcome = orders.step(link["args"][0], done)
    assert outcome.outcome == "applied"
    paid = orders.get("o-7")
    assert paid is not None
    assert paid.value == "paid"
    assert paid.context["receipt"] == {"charged": 42}
    assert paid.waiting_for == {}
    assert all(t.key != task_id for t in orders.stores().timers.due(time.time() + 3600))


def test_a_completion_for_a_left_state_is_stale(app: Celery, store_url: str) -> None:
    """After CANCEL the charge result is ignored, logged and counted, and nothing is saved."""
    orders = _workflow(app, store_url)
    view = orders.send_now("o-8", "PAY", total=5)
    [task_id] = view.waiting_for.values()
    cancelled = orders.send_now("o-8", "CANCEL")
    assert cancelled.value == "cancelled"
    assert cancelled.waiting_for == {}
    with captured_facts() as facts:
        outcome = orders.step(
            "o-8", Message(f"done:{task_id}", "done", invoke="charge", dispatch=task_id, data=1)
        )
    assert outcome.outcome == "stale"
    assert [f.kind for f in facts].count(FactKind.STALE_COMPLETION) == 1
    after = orders.get("o-8")
    assert after is not None
    assert after.version == cancelled.version


def test_a_completion_with_another_task_id_is_stale(app: Celery, store_url: str) -> None:
    """A forged or old task id never completes the active invocation."""
    orders = _workflow(app, store_url)
    orders.send_now("o-9", "PAY", total=5)
    outcome = orders.step(
        "o-9", Message("done:forged", "done", invoke="charge", dispatch="forged", data=1)
    )
    assert outcome.outcome == "stale"
    view = orders.get("o-9")
    assert view is not None
    assert view.value == "charging"


def test_an_error_completion_reaches_on_error(app: Celery, store_url: str) -> None:
    """error.platform.charge carries a ServiceTaskFailed with the task's error type."""
    orders = _workflow(app, store_url)
    view = orders.send_now("o-10", "PAY", total=5)
    [task_id] = view.waiting_for.values()
    info = {"task": "charge", "type": "CardDeclined", "message": "no funds"}
    orders.step(
        "o-10", Message(f"error:{task_id}", "error", invoke="charge", dispatch=task_id, data=info)
    )
    failed = orders.get("o-10")
    assert failed is not None
    assert failed.value == "failed"
    assert failed.context["error"] == "CardDeclined"


def test_a_stale_timer_is_ignored(app: Celery, store_url: str) -> None:
    """A timer message whose timer was cancelled (the state was left) changes nothing."""
    orders = _workflow(app, store_url)
    view = orders.start("o-11")
    [timer] = view.timers
    orders.send_now("o-11", "PAY", total=1)
    before = orders.get("o-11")
    message = Message(
        "t-1",
        "timer",
        type=timer.event_type,
        payload={"state_id": timer.state_id},
        due_at=timer.due_at,
    )
    assert orders.step("o-11", message).outcome == "stale"
    after = orders.get("o-11")
    assert before is not None
    assert after is not None
    assert after.version == before.version


def test_a_due_timer_fires_from_its_message(app: Celery, store_url: str) -> None:
    """The timer message of a due timer expires the order and reports its lag."""
    orders = _workflow(app, store_url)
    view = orders.start("o-12")
    [timer] = view.timers
    record = orders.stores().snapshots.load("order:o-12")
    data = json.loads(record.snapshot)
    data["deadlines"][0]["due_at_wall"] = time.time() - 1
    message = Message(
        "t-2",
        "timer",
        type=timer.event_type,
        payload={"state_id": timer.state_id},
        due_at=data["deadlines"][0]["due_at_wall"],
    )
    orders.stores().snapshots.save("order:o-12", json.dumps(data))
    with captured_facts() as facts:
        assert orders.step("o-12", message).outcome == "applied"
    expired = orders.get("o-12")
    assert expired is not None
    assert expired.value == "expired"
    assert expired.status == "done"
    lags = [f.fields["lag_s"] for f in facts if f.kind is FactKind.TIMER_FIRED]
    assert len(lags) == 1
    assert 0.5 < float(lags[0]) < 30  # type: ignore[arg-type]


def test_a_long_timer_is_a_row_fired_by_the_beat_scan(
    app: Celery, broker: tuple[str, redis_lib.Redis], store_url: str
) -> None:
    """A delay above xsm_timer_countdown_max_s is no countdown: Beat's scan publishes it."""
    orders = _workflow(app, store_url)
    orders.start("o-13")
    assert _queued(app, broker[1]) == []
    rows = orders.stores().timers.due(time.time() + 3600)
    assert len(rows) == 1
    assert fire_due_timers(app, now=time.time()) == 0
    assert fire_due_timers(app, now=time.time() + 61) == 1
    [message] = _queued(app, broker[1])
    assert message["headers"]["task"] == "xsm.workflow.order"
    assert message["headers"]["id"] == rows[0].key
    # Published, not forgotten: the row waits, postponed, until the step applies the timer.
    [kept] = orders.stores().timers.due(time.time() + 3600)
    assert kept.key == rows[0].key
    assert kept.due_at > rows[0].due_at
    body = json.loads(base64.b64decode(message["body"]))
    timer = Message.from_dict(body[0][1])
    assert orders.step("o-13", timer).outcome == "applied"  # early: the timer is armed again
    assert [t.key for t in orders.stores().timers.due(time.time() + 3600)] == [rows[0].key]


def test_a_short_timer_is_a_countdown_message(
    app: Celery, broker: tuple[str, redis_lib.Redis], store_url: str
) -> None:
    """A delay within the countdown limit is published with its eta; its row waits a grace
    behind it (for a worker killed holding the countdown) until the timer is applied."""

    @app.task(name=f"{app.main}.charge")
    def charge(amount: int) -> int:
        return amount

    orders = Xsm(app).workflow(order_machine(charge, timeout_ms=2_000), store=store_url)
    orders.start("o-14")
    [message] = _queued(app, broker[1])
    assert message["headers"]["task"] == "xsm.workflow.order"
    assert message["headers"]["eta"] is not None
    [row] = orders.stores().timers.due(time.time() + 3600)
    assert row.key == message["headers"]["id"]
    assert 25 < row.due_at - time.time() < 35  # the timer's 2 s plus the 30 s grace
    body = json.loads(base64.b64decode(message["body"]))
    timer = Message.from_dict(body[0][1])
    assert timer.due_at is not None
    time.sleep(max(0.0, timer.due_at - time.time()) + 0.05)
    assert orders.step("o-14", timer).outcome == "applied"
    view = orders.get("o-14")
    assert view is not None
    assert view.value == "expired"
    assert orders.stores().timers.due(time.time() + 3600) == []


def test_a_forced_rollback_leaves_no_row_and_sends_nothing(
    app: Celery,
    broker: tuple[str, redis_lib.Redis],
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure inside the commit drops the snapshot, outbox row, back-stop row and dispatch."""

    class Refuse:
        def on_persist(self, interp: Any, store: Any) -> None:
            raise RuntimeError("forced rollback")

    orders = _workflow(app, store_url, outbox_topic="orders")
    orders.start("o-15")
    rows_before = orders.stores().timers.due(time.time() + 3600)
    plugins = (*orders.step_plugins(), Refuse())
    monkeypatch.setattr(StepContext, "plugins", lambda ctx: plugins)
    with pytest.raises(RuntimeError, match="forced rollback"):
        orders.send_now("o-15", "PAY", total=3)
    view = orders.get("o-15")
    assert view is not None
    assert view.value == "created"
    assert view.version == 1
    assert orders.stores().outbox.count() == 0
    assert orders.stores().timers.due(time.time() + 3600) == rows_before
    assert _queued(app, broker[1]) == []


def test_the_asyncapi_document_names_the_workflow_queue(app: Celery) -> None:
    """The inbound channel is the step task's Celery queue; the document validates."""
    from xsm_celery.eda.asyncapi import validate_asyncapi

    orders = _workflow(app, "memory://", queue="orders-in", outbox_topic="orders-out")
    document = orders.asyncapi({"host": "localhost:5672", "protocol": "amqp"})
    validate_asyncapi(document)
    addresses = {c["address"] for c in document["channels"].values()}
    assert "orders-in" in addresses
    assert "orders-out" in addresses
    inbound = next(c for c in document["channels"].values() if c["address"] == "orders-in")
    assert inbound["bindings"]["amqp"]["queue"]["name"] == "orders-in"


@pytest.fixture
def eager() -> Iterator[Celery]:
    """An eager app: step tasks (and their retries) run inline, dead letters in memory."""
    celery = Celery(f"wf-eager-{uuid.uuid4().hex[:6]}", broker="memory://")
    celery.conf.task_always_eager = True
    celery.conf.xsm_dead_letter_store = f"memory://{celery.main}"
    yield celery
    celery.close()


def test_a_failing_step_task_is_retried_then_dead_lettered(eager: Celery) -> None:
    """The policy's attempts run, then one dead letter carries the event and the chain."""
    from xsm_celery.celery.stores import stores_for
    from xsm_celery.patterns import RetryPolicy

    orders = _workflow(eager, "memory://", retry_policy=RetryPolicy(max_attempts=3, base_ms=1))
    orders.start("o-20")
    with captured_facts() as facts:
        result = orders.send("o-20", "BOOM", note="x")
    assert result.failed()
    outcomes = [f.fields["outcome"] for f in facts if f.kind is FactKind.WORKFLOW_STEP_FAILED]
    assert outcomes == ["retry", "retry", "dead_letter"]
    [letter] = stores_for(eager).dead_letters().list()
    assert letter.attempts == 3
    assert letter.event == {"type": "BOOM", "payload": {"note": "x"}}
    assert len(letter.errors) == 3
    assert letter.task_args[0] == "o-20"
    view = orders.get("o-20")
    assert view is not None
    assert view.version == 1


def test_the_decorator_form_names_the_workflow_after_the_function(app: Celery) -> None:
    """@xsm.workflow(store=...) over a function returning the machine registers it by name."""
    xsm = Xsm(app)

    @xsm.workflow(store="memory://")
    def subscriptions() -> Any:
        return order_machine(f"{app.main}.charge", chart_id="subscription")

    assert isinstance(subscriptions, Workflow)
    assert subscriptions.task.name == "xsm.workflow.subscriptions"
    assert subscriptions.start("s-1").value == "created"


def test_a_step_dead_letter_waits_in_the_spool_while_the_store_is_down(
    eager: Celery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The give-up with the store down keeps the record on disk; the next write flushes it."""
    from xsm_celery.celery.deadletter.spool import DeadLetterSpool
    from xsm_celery.celery.stores import stores_for
    from xsm_celery.errors import StoreUnavailableError
    from xsm_celery.patterns import RetryPolicy

    eager.conf.xsm_dead_letter_spool = str(tmp_path / "spool")
    orders = _workflow(eager, "memory://", retry_policy=RetryPolicy(max_attempts=1, base_ms=1))
    store = stores_for(eager).dead_letters()
    real_put = store.put

    def down(record: Any) -> None:
        raise StoreUnavailableError("dead-letter store is down")

    monkeypatch.setattr(store, "put", down)
    assert orders.send("o-30", "BOOM").failed()
    spool = DeadLetterSpool(tmp_path / "spool")
    [spooled_id] = list(spool.ids())
    assert store.list() == []
    monkeypatch.setattr(store, "put", real_put)
    assert orders.send("o-31", "BOOM").failed()
    assert list(spool.ids()) == []
    letters = {letter.id: letter for letter in store.list()}
    assert spooled_id in letters
    assert {letter.task_args[0] for letter in letters.values()} == {"o-30", "o-31"}
