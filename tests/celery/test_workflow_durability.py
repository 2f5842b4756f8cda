"""Durability rules of the workflow step task, in process: counters in the store, not the
message; outages uncounted; secrets masked; every timer and task step a row the Beat scan
re-publishes. The same rules on real workers and services are in tests/faults/."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Retry
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.celery.workflow_charts import order_machine
from tests.celery.workflow_support import captured_facts
from xsm_celery import hooks
from xsm_celery.celery import Workflow, Xsm, fire_due_timers
from xsm_celery.celery.stores import stores_for
from xsm_celery.celery.workflow.ledger import StepLedger, ledger_key, read_ledger
from xsm_celery.celery.workflow.step import Message
from xsm_celery.errors import StoreUnavailableError, WorkflowStepError
from xsm_celery.hooks import FactKind
from xsm_celery.metrics.prometheus import PrometheusMetrics
from xsm_celery.patterns import RetryPolicy

CARD = "4111111111111111"


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """Prometheus metrics in a registry of their own, fed the facts of the test only."""
    found = CollectorRegistry()
    stop = hooks.subscribe(PrometheusMetrics(found).handle)
    try:
        yield found
    finally:
        stop()


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app with memory stores and no broker traffic (tasks are applied in process)."""
    name = f"wf-dur-{uuid.uuid4().hex[:8]}"
    celery = Celery(name, broker="memory://")
    celery.conf.xsm_dead_letter_store = f"memory://{name}"
    celery.conf.xsm_attempt_markers = "memory://"
    celery.conf.xsm_dead_letter_spool = f"/tmp/xsm-spool-{name}"
    yield celery
    celery.close()


def _orders(app: Celery, explode: Any = None, **options: Any) -> Workflow:
    @app.task(name=f"{app.main}.charge")
    def charge(amount: int) -> dict[str, int]:
        return {"charged": amount}

    options.setdefault("retry_policy", RetryPolicy(max_attempts=5, base_ms=1, jitter="none"))
    machine = order_machine(charge, explode=explode)
    return Xsm(app).workflow(machine, store="memory://", **options)


def _run(flow: Workflow, key: str, message: Message, **kwargs: Any) -> Any:
    """Apply the step task in process as a worker would run it; retries run inline."""
    return flow.task.apply(args=[key, message.to_dict()], kwargs=kwargs)


def _letters(app: Celery) -> list[Any]:
    return list(stores_for(app).dead_letters().all())


def test_an_always_failing_step_runs_max_attempts_times_then_one_dead_letter(
    app: Celery, registry: CollectorRegistry
) -> None:
    """Celery's max_retries=3 no longer ends the step: five runs, then one dead letter, seen
    by the documented alert's counter."""
    runs: list[int] = []

    def explode(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        runs.append(1)
        raise RuntimeError("the warehouse API is down")

    orders = _orders(app, explode)
    orders.start("o-1")
    with captured_facts() as facts:
        result = _run(orders, "o-1", Message("m-1", "event", type="BOOM"))
    assert result.failed()
    assert len(runs) == 5
    [letter] = _letters(app)
    assert letter.attempts == 5
    assert letter.reason == "task_exhausted"
    assert letter.topic == "workflow:order:o-1"
    assert len(letter.errors) == 5
    written = [f for f in facts if f.kind is FactKind.DEAD_LETTER_WRITTEN]
    assert [(f.fields["source"], f.fields["workflow"]) for f in written] == [("workflow", "order")]
    labels = {"source": "workflow", "reason": "task_exhausted"}
    assert registry.get_sample_value("xsm_dead_letters_total", labels) == 1


@pytest.mark.parametrize(
    "forged",
    [
        {"failures": 99, "lost": 50, "runs": 7},
        {"failures": -1_000_000, "lost": -5},
        {"errors": [{"source": "forged", "name": "x", "type": "X", "message": "forged"}]},
    ],
)
def test_forged_counters_in_the_message_change_nothing(app: Celery, forged: dict[str, Any]) -> None:
    """The step's kwargs are ignored: the store's ledger alone decides, and holds no forgery."""
    runs: list[int] = []

    def explode(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        runs.append(1)
        raise RuntimeError("down")

    orders = _orders(app, explode)
    orders.start("o-2")
    assert _run(orders, "o-2", Message("m-2", "event", type="BOOM"), **forged).failed()
    assert len(runs) == 5
    [letter] = _letters(app)
    assert letter.attempts == 5
    assert "forged" not in json.dumps(letter.errors)
    ledger = read_ledger(orders.stores().inbox, orders.store_key("o-2"), "m-2")
    assert (ledger.failures, ledger.lost) == (5, 0)


def test_an_outage_is_deferred_uncounted(app: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store outage retries the step without counting it; the policy is untouched."""
    orders = _orders(app)
    orders.start("o-3")
    task = orders.task

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("database is down")

    monkeypatch.setattr("xsm_celery.celery.workflow.task.run_step", down)
    retried: list[dict[str, Any]] = []

    def retry(*args: Any, **kwargs: Any) -> Retry:
        retried.append(kwargs)
        return Retry("deferred")

    monkeypatch.setattr(task, "retry", retry)
    task.push_request(id="t-3", retries=0, delivery_info={}, is_eager=False)
    try:
        with pytest.raises(Retry):
            task.run("o-3", Message("m-3", "event", type="NOTE").to_dict(), failures=99)
    finally:
        task.pop_request()
    assert len(retried) == 1
    assert retried[0]["kwargs"] == {}
    assert retried[0]["countdown"] <= 5.0
    ledger = read_ledger(orders.stores().inbox, orders.store_key("o-3"), "m-3")
    assert ledger == StepLedger()
    assert _letters(app) == []


def test_an_outage_longer_than_the_bound_is_a_deferred_too_long_dead_letter(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past xsm_workflow_outage_max_s the message is one dead letter with its own reason."""
    app.conf.xsm_workflow_outage_max_s = 30
    orders = _orders(app)
    orders.start("o-4")
    task = orders.task
    markers = stores_for(app).markers()
    markers.mark("t-4:deferred", 1)  # first deferred at the epoch: long past the bound

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailableError("database is down")

    monkeypatch.setattr("xsm_celery.celery.workflow.task.run_step", down)
    task.push_request(id="t-4", retries=40, delivery_info={}, is_eager=False)
    try:
        with pytest.raises(Exception, match="xsm_workflow_outage_max_s"):
            task.run("o-4", Message("m-4", "event", type="NOTE").to_dict())
    finally:
        task.pop_request()
    [letter] = _letters(app)
    assert letter.reason == "deferred_too_long"
    assert letter.topic == "workflow:order:o-4"


def test_an_action_error_keeps_no_secret_of_the_payload(app: Celery) -> None:
    """The card number an action copies into its error is masked in the error, the step
    error and the dead letter."""

    def explode(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        raise ValueError(f"card {event.payload['card_number']} declined")

    orders = _orders(app, explode, retry_policy=RetryPolicy(max_attempts=1, base_ms=1))
    orders.start("o-5")
    with pytest.raises(WorkflowStepError) as caught:
        orders.send_now("o-5", "BOOM", card_number=CARD)
    assert CARD not in str(caught.value)
    assert CARD not in str(caught.value.__cause__)
    result = _run(
        orders, "o-5", Message("m-5", "event", type="BOOM", payload={"card_number": CARD})
    )
    assert result.failed()
    assert CARD not in str(result.result)
    [letter] = _letters(app)
    assert CARD not in letter.to_json()


def test_a_task_step_row_stays_until_its_completion_and_beat_sends_it_again(
    app: Celery, monkeypatch: pytest.MonkeyPatch, registry: CollectorRegistry
) -> None:
    """A dispatched task step keeps its row; overdue, the scan sends the task again with the
    same id and postpones the row; the completion deletes it."""
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "xsm_celery.celery.workflow.step.send_spec",
        lambda app, task_id, payload, countdown=None: sent.append((task_id, payload["task"])),
    )
    monkeypatch.setattr(
        "xsm_celery.celery.workflow.recovery.send_spec",
        lambda app, task_id, payload, countdown=None: sent.append((task_id, payload["task"])),
    )
    orders = _orders(app)
    view = orders.send_now("o-6", "PAY", total=7)
    [task_id] = view.waiting_for.values()
    assert sent == [(task_id, f"{app.main}.charge")]
    [row] = orders.stores().timers.due(1e12)
    assert row.key == task_id
    with captured_facts() as facts:
        assert fire_due_timers(app, now=row.due_at + 1) == 1
    assert sent[-1] == (task_id, f"{app.main}.charge")
    [again] = orders.stores().timers.due(1e12)
    assert again.due_at > row.due_at
    recovered = [f for f in facts if f.kind is FactKind.TIMER_FIRED]
    assert [f.fields["purpose"] for f in recovered] == ["workflow_task_step"]
    # How late the instance was woken is a metric: the lag histogram by purpose.
    lag = {"purpose": "workflow_task_step"}
    assert registry.get_sample_value("xsm_timer_lag_seconds_count", lag) == 1
    assert registry.get_sample_value("xsm_timer_lag_seconds_sum", lag) > 500
    done = Message(f"done:{task_id}", "done", invoke="charge", dispatch=task_id, data=1)
    assert orders.step("o-6", done).outcome == "applied"
    assert orders.stores().timers.due(1e12) == []


def test_leaving_a_state_drops_its_task_step_row(app: Celery) -> None:
    """CANCEL leaves charging: its task step's row goes in the same transaction."""
    orders = _orders(app)
    orders.send_now("o-7", "PAY", total=7)
    assert len(orders.stores().timers.due(1e12)) == 1
    orders.send_now("o-7", "CANCEL")
    assert orders.stores().timers.due(1e12) == []


@given(st.text(max_size=200))
def test_a_stored_ledger_that_is_not_ours_counts_as_nothing(text: str) -> None:
    """Whatever the column holds, parsing gives non-negative counters and never raises."""
    ledger = StepLedger.from_json(text)
    assert ledger.failures >= 0
    assert ledger.lost >= 0


@given(st.text(min_size=1, max_size=600))
def test_a_ledger_key_fits_the_inbox_column_for_any_message_id(message_id: str) -> None:
    """The ledger's inbox key is a fixed-length digest, whatever the message id."""
    key = ledger_key(message_id)
    assert len(key) <= 64
    assert key.startswith("ledger:")


STUCK_CHART: dict[str, Any] = {
    "id": "undo",
    "initial": "compensating",
    "states": {
        "compensating": {
            "invoke": {
                "id": "release",
                "src": "release",
                "onDone": "failed",
                "onError": "compensationFailed",
            },
        },
        "failed": {"type": "final"},
        "compensationFailed": {"type": "final", "tags": ["dead-letter"]},
    },
}


def test_a_failed_compensation_is_a_dead_letter_with_its_error_and_attempts(
    app: Celery,
) -> None:
    """The task step's error and the runs it made reach the compensationFailed record."""
    from xsm_celery.celery import celery_service
    from xsm_celery.engine import MachineLogic, create_machine

    @app.task(name=f"{app.main}.release")
    def release() -> None: ...

    logic = MachineLogic(services={"release": celery_service(release)})
    undo = Xsm(app).workflow(create_machine(STUCK_CHART, logic=logic), store="memory://")
    view = undo.start("u-1")
    [task_id] = view.waiting_for.values()
    failure = {
        "task": release.name,
        "type": "RuntimeError",
        "message": "release refused",
        "attempts": 3,
    }
    error = Message(f"error:{task_id}", "error", invoke="release", dispatch=task_id, data=failure)
    with captured_facts() as facts:
        assert undo.step("u-1", error).outcome == "applied"
    [letter] = _letters(app)
    assert letter.state_id.endswith("compensationFailed")
    assert letter.topic == "workflow:undo:u-1"
    assert letter.attempts == 3
    assert [(e["type"], e["message"]) for e in letter.errors] == [
        ("ServiceTaskFailed", letter.errors[0]["message"])
    ]
    assert "release refused" in letter.errors[0]["message"]
    written = [f for f in facts if f.kind is FactKind.DEAD_LETTER_WRITTEN]
    assert [f.fields["source"] for f in written] == ["workflow"]
