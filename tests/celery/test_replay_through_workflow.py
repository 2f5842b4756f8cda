"""A workflow's dead letters replay through its instance, and say which instance they are."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.celery.queues import drain_queue
from tests.celery.workflow_charts import order_machine
from tests.contract_dead_letters import make_record
from xsm_celery.celery import ChartTask, Workflow, Xsm, replay_task
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.task.execute import WORKFLOW_HEADER
from xsm_celery.celery.workflow import WORKFLOW_TASK_PREFIX
from xsm_celery.errors import ReplayRefusedError
from xsm_celery.patterns import DeadLetter, RetryPolicy
from xsm_celery.patterns.dead_letter.workflow import (
    STEP_TASK_PREFIX,
    WorkflowPart,
    WorkflowRef,
    workflow_of_record,
)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    """An app on the in-memory broker, its own queue, dead-letter store and spool."""
    celery_app = Celery(f"wf-replay-{uuid.uuid4().hex[:6]}", set_as_current=False)
    celery_app.conf.update(
        broker_url="memory://",
        task_default_queue=f"wf-replay-{uuid.uuid4().hex[:6]}",
        xsm_dead_letter_store=f"memory://{uuid.uuid4().hex}",
        xsm_dead_letter_spool=str(tmp_path / "spool"),
    )
    yield celery_app
    celery_app.close()


@pytest.fixture
def orders(app: Celery) -> Workflow:
    """The order workflow in memory; its ``charge`` step is a chart task that gives up at once."""

    @app.task(
        shared=False,
        base=ChartTask,
        name=f"{app.main}.charge",
        retry_policy=RetryPolicy(max_attempts=1),
    )
    def charge(amount: int) -> None:
        raise ConnectionError("gateway down")

    return Xsm(app).workflow(
        order_machine(charge),
        store="memory://",
        retry_policy=RetryPolicy(max_attempts=1, base_ms=1),
    )


def dead_letters(app: Celery) -> Any:
    """The app's dead-letter store."""
    return stores_for(app).dead_letters()


def sent(app: Celery, task_name: str) -> list[Any]:
    """The messages of ``task_name`` published on the app's queue (others are dropped)."""
    return [m for m in drain_queue(app, timeout=0.05) if m.headers["task"] == task_name]


def gave_up_task_step(app: Celery, orders: Workflow, key: str) -> DeadLetter:
    """Pay order ``key``, then run its dispatched charge as a worker would, until it gives up.

    Its errback is not run, so the instance still waits for the task, as when the failure
    report never arrived.
    """
    orders.start(key)
    orders.send_now(key, "PAY", total=5)
    (message,) = sent(app, f"{app.main}.charge")
    args, kwargs, _ = message.decode()
    task_id = message.headers["id"]
    app.tasks[f"{app.main}.charge"].apply(
        args, kwargs, task_id=task_id, headers={WORKFLOW_HEADER: message.headers[WORKFLOW_HEADER]}
    )
    return next(r for r in dead_letters(app).all() if r.task_id == task_id)


def test_a_task_step_the_instance_waits_for_is_sent_with_its_id_and_callbacks(
    app: Celery, orders: Workflow
) -> None:
    """The replay reuses the awaited task id and links the result back to the workflow."""
    record = gave_up_task_step(app, orders, "o-1")
    view = orders.get("o-1")
    assert view is not None
    assert view.waiting_for == {"charge": record.task_id}
    result = replay_task(
        dead_letters(app), record.id, app, reason="gateway fixed", dry_run=False, actor="ana"
    )
    (message,) = sent(app, f"{app.main}.charge")
    assert message.headers["id"] == record.task_id == result.task_id
    # The replayed record rides along, so a give-up of the replay is a record of its own.
    assert message.headers[WORKFLOW_HEADER] == {
        "workflow": "order",
        "key": "o-1",
        "replay": record.id,
    }
    args, kwargs, embed = message.decode()
    assert (args, kwargs) == ([], {"amount": 5})
    assert [c["task"] for c in embed["callbacks"]] == ["xsm.workflow.order"]
    assert embed["callbacks"][0]["args"][1]["dispatch"] == record.task_id
    assert [e["task"] for e in embed["errbacks"]] == ["xsm_celery.workflow_failed"]
    assert (result.workflow, result.key) == ("order", "o-1")
    assert dead_letters(app).get(record.id).resolved_at is not None
    (audit,) = dead_letters(app).audit_log(record.id)
    assert (audit["actor"], audit["reason"]) == ("ana", "gateway fixed")
    assert "order[o-1]" in audit["outcome"]


def test_a_replayed_task_step_that_gives_up_again_is_a_new_dead_letter(
    app: Celery, orders: Workflow
) -> None:
    """Same task id, second give-up: a record of its own, not the resolved one found again."""
    record = gave_up_task_step(app, orders, "o-9")
    replay_task(dead_letters(app), record.id, app, reason="try again", dry_run=False)
    (message,) = sent(app, f"{app.main}.charge")
    args, kwargs, _ = message.decode()
    app.tasks[f"{app.main}.charge"].apply(
        args,
        kwargs,
        task_id=record.task_id,
        headers={WORKFLOW_HEADER: message.headers[WORKFLOW_HEADER]},
    )
    records = [r for r in dead_letters(app).all() if r.task_id == record.task_id]
    assert len(records) == 2
    [again] = [r for r in records if r.id != record.id]
    assert again.resolved_at is None


def test_a_task_step_the_instance_moved_on_from_is_refused_with_its_state(
    app: Celery, orders: Workflow
) -> None:
    """An instance that left the invoking state gets nothing; the refusal names its state."""
    record = gave_up_task_step(app, orders, "o-2")
    orders.send_now("o-2", "CANCEL")
    drain_queue(app, timeout=0.05)
    with pytest.raises(ReplayRefusedError, match="no longer waits") as caught:
        replay_task(dead_letters(app), record.id, app, reason="gateway fixed", dry_run=False)
    assert "order.cancelled" in str(caught.value)
    assert "status done" in str(caught.value)
    assert sent(app, f"{app.main}.charge") == []
    assert dead_letters(app).get(record.id).resolved_at is None
    with pytest.raises(ReplayRefusedError, match="no longer waits"):
        replay_task(dead_letters(app), record.id, app)


def test_a_task_step_dry_run_names_the_workflow_and_key_and_sends_nothing(
    app: Celery, orders: Workflow
) -> None:
    """The dry run says the task goes back to the instance under its own id, and does nothing."""
    record = gave_up_task_step(app, orders, "o-3")
    result = replay_task(dead_letters(app), record.id, app)
    assert (result.dry_run, result.workflow, result.key) == (True, "order", "o-3")
    assert "order[o-3]" in result.outcome
    assert str(record.task_id) in result.outcome
    assert sent(app, f"{app.main}.charge") == []
    assert dead_letters(app).get(record.id).resolved_at is None
    assert dead_letters(app).audit_log(record.id) == []


def test_a_step_message_dry_run_names_the_workflow_and_key(app: Celery, orders: Workflow) -> None:
    """A failed step message's dry run says it goes to that instance again."""
    orders.start("o-4")
    drain_queue(app, timeout=0.05)
    orders.task.apply(args=["o-4", {"id": "m-4", "kind": "event", "type": "BOOM"}])
    record = next(r for r in dead_letters(app).all() if r.task_name == "xsm.workflow.order")
    result = replay_task(dead_letters(app), record.id, app)
    assert (result.workflow, result.key) == ("order", "o-4")
    assert "event BOOM m-4 to workflow order[o-4] again" in result.outcome
    assert drain_queue(app, timeout=0.05) == []


def test_a_step_message_replay_sends_the_same_message_again(app: Celery, orders: Workflow) -> None:
    """A real replay of a step message sends (key, message) to the step task, as before."""
    orders.start("o-5")
    drain_queue(app, timeout=0.05)
    orders.task.apply(args=["o-5", {"id": "m-5", "kind": "event", "type": "BOOM"}])
    record = next(r for r in dead_letters(app).all() if r.task_name == "xsm.workflow.order")
    result = replay_task(dead_letters(app), record.id, app, reason="fixed", dry_run=False)
    (message,) = sent(app, "xsm.workflow.order")
    assert message.decode()[0] == ["o-5", {"id": "m-5", "kind": "event", "type": "BOOM"}]
    assert (result.workflow, result.key) == ("order", "o-5")


def test_a_task_step_of_an_undeclared_workflow_is_refused_naming_the_import(
    app: Celery,
) -> None:
    """Without the workflow in this process the instance cannot be checked: say what to import."""
    record = make_record(
        task_name="shop.charge",
        task_args=[7],
        task_kwargs={},
        event={"type": "error", "payload": {"workflow": "nowhere", "key": "k"}},
    )
    dead_letters(app).put(record)
    with pytest.raises(ReplayRefusedError, match="not declared on app") as caught:
        replay_task(dead_letters(app), record.id, app)
    assert "import the module that calls xsm.workflow(...) for 'nowhere'" in str(caught.value)


def test_a_task_step_whose_instance_is_gone_is_refused(app: Celery, orders: Workflow) -> None:
    """A key the store does not hold waits for nothing."""
    record = make_record(
        task_name=f"{app.main}.charge",
        task_args=[],
        task_kwargs={},
        event={"type": "error", "payload": {"workflow": "order", "key": "gone"}},
    )
    dead_letters(app).put(record)
    with pytest.raises(ReplayRefusedError, match="not in the workflow's store"):
        replay_task(dead_letters(app), record.id, app)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"task_name": "xsm.workflow.order", "task_args": ["o-1", {"id": "m"}]},
            WorkflowRef("order", "o-1", WorkflowPart.STEP_MESSAGE),
        ),
        (
            {"event": {"type": "e", "payload": {"workflow": "order", "key": "o-2", "canvas": {}}}},
            WorkflowRef("order", "o-2", WorkflowPart.TASK_STEP),
        ),
        (
            {
                "task_name": None,
                "task_args": None,
                "task_kwargs": None,
                "topic": "workflow:order:a:b",
            },
            WorkflowRef("order", "a:b", WorkflowPart.DEAD_LETTER_STATE),
        ),
        ({}, None),
        ({"task_name": None, "task_args": None, "task_kwargs": None, "topic": "orders"}, None),
    ],
)
def test_the_record_names_its_workflow_instance(
    overrides: dict[str, Any], expected: WorkflowRef | None
) -> None:
    """Step messages, task steps and dead-letter states are told apart; others belong to none."""
    assert workflow_of_record(make_record(**overrides)) == expected


def test_the_core_prefix_is_the_step_task_prefix() -> None:
    """The core repeats the step task prefix; the two must never drift apart."""
    assert STEP_TASK_PREFIX == WORKFLOW_TASK_PREFIX
