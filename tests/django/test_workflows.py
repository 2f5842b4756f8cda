"""Workflows on the Django stores: the journal in the step's transaction, and the instances admin.

Steps run in this process (``send_now``) on SQLite and PostgreSQL; task messages go to kombu's
in-memory transport. The admin pages are requested with Django's test client.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from django.test import Client

from tests.celery.workflow_charts import order_machine
from tests.django.admin_support import PASSWORD, make_user
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.django.models import (
    AuditEntry,
    OutboxMessage,
    WorkflowInstance,
    WorkflowTransition,
)
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.errors import WorkflowStepError


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app on the in-memory broker whose dead letters go to the Django store."""
    celery = Celery(f"wf-django-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    celery.conf.xsm_dead_letter_store = DjangoDeadLetterStore()
    celery.conf.xsm_timer_countdown_max_s = 5.0
    yield celery
    celery.close()


def _orders(app: Celery, alias: str) -> Workflow:
    store = "django" if alias == "default" else f"django://{alias}"
    return Xsm(app).workflow(
        order_machine("wf_django.charge"),
        store=store,
        name=f"orders_{uuid.uuid4().hex[:6]}",
        outbox_topic="orders",
    )


def test_a_step_writes_its_summary_and_transitions_with_the_snapshot(
    app: Celery, db_alias: str
) -> None:
    """Each committed step updates the instance row and appends its transitions."""
    orders = _orders(app, db_alias)
    orders.start("o-1")
    orders.send_now("o-1", "PAY", total=12)
    row = WorkflowInstance.objects.using(db_alias).get(workflow=orders.name, key="o-1")
    assert row.state == "order.charging"
    assert row.status == "running"
    assert row.machine_id == "order"
    log = WorkflowTransition.objects.using(db_alias).filter(workflow=orders.name, key="o-1")
    assert [(t.message, t.source, t.target) for t in log.order_by("id")] == [
        ("start", "", "order.created"),
        ("event", "order.created", "order.charging"),
    ]
    assert (
        OutboxMessage.objects.using(db_alias).filter(subject=orders.store_key("o-1")).count() == 1
    )


def test_a_rolled_back_step_writes_no_journal_row(app: Celery, db_alias: str) -> None:
    """A failing action leaves the instance row and the log as they were."""
    orders = _orders(app, db_alias)
    orders.start("o-2")
    before = WorkflowTransition.objects.using(db_alias).count()
    with pytest.raises(WorkflowStepError):
        orders.send_now("o-2", "BOOM")
    assert WorkflowTransition.objects.using(db_alias).count() == before
    row = WorkflowInstance.objects.using(db_alias).get(workflow=orders.name, key="o-2")
    assert row.state == "order.created"


def _row(orders: Workflow, key: str) -> WorkflowInstance:
    return WorkflowInstance.objects.get(workflow=orders.name, key=key)


def test_the_list_filters_and_searches_instances(app: Celery, operator: Client) -> None:
    """The list shows machine, key, state and status; filters and search narrow it."""
    orders = _orders(app, "default")
    orders.start("alpha-1")
    orders.send_now("beta-2", "PAY", total=3)
    page = operator.get("/admin/xsm_celery/workflowinstance/")
    text = page.content.decode()
    assert page.status_code == 200
    assert "alpha-1" in text
    assert "beta-2" in text
    assert "order.charging" in text
    one = operator.get("/admin/xsm_celery/workflowinstance/", {"q": "beta"}).content.decode()
    assert "beta-2" in one
    assert "alpha-1" not in one
    filtered = operator.get(
        "/admin/xsm_celery/workflowinstance/", {"state": "order.created"}
    ).content.decode()
    assert "alpha-1" in filtered
    assert "beta-2" not in filtered


def test_the_detail_page_shows_diagram_context_timers_and_log(
    app: Celery, operator: Client
) -> None:
    """Active state marked, secrets masked, the pending timer's due time, the transitions."""
    orders = _orders(app, "default")
    orders.start("o-3", context={"card_token": "tok_live_123"})
    orders.send_now("o-3", "NOTE")
    row = _row(orders, "o-3")
    page = operator.get(f"/admin/xsm_celery/workflowinstance/{row.pk}/change/").content.decode()
    marked = re.findall(r'<g[^>]*xsm-marked[^>]*data-state="([^"]+)"', page)
    assert marked == ["order.created"]
    assert "tok_live_123" not in page
    assert "***" in page
    assert "after.payment_timeout.order.created" in page
    assert page.count('class="xsm-transition"') == 2
    assert 'id="xsm-send-event"' in page


def test_an_operator_sends_an_event_after_a_dry_run_with_a_reason(
    app: Celery, operator: Client
) -> None:
    """Only accepted events are offered; the dry run changes nothing; the send is audited."""
    orders = _orders(app, "default")
    orders.start("o-4")
    row = _row(orders, "o-4")
    url = f"/admin/xsm_celery/workflowinstance/{row.pk}/send-event/"
    form = operator.get(url).content.decode()
    assert '<option value="PAY">' in form
    assert '<option value="SHIP">' not in form
    assert 'name="confirm"' not in form
    view = orders.get("o-4")
    assert view is not None
    dry = operator.post(
        url,
        {
            "event": "PAY",
            "payload": '{"total": 8}',
            "reason": "stuck INC-9",
            "version": view.version,
            "dry_run": "1",
        },
    ).content.decode()
    assert "order.created -&gt; order.charging" in dry
    assert 'name="confirm"' in dry
    still = orders.get("o-4")
    assert still is not None
    assert still.value == "created"
    missing = operator.post(
        url,
        {"event": "PAY", "payload": "{}", "reason": "", "version": view.version, "confirm": "1"},
    )
    assert missing.status_code == 200
    assert orders.get("o-4").value == "created"  # type: ignore[union-attr]
    sent = operator.post(
        url,
        {
            "event": "PAY",
            "payload": '{"total": 8}',
            "reason": "stuck INC-9",
            "version": view.version,
            "confirm": "1",
        },
    )
    assert sent.status_code == 302
    after = orders.get("o-4")
    assert after is not None
    assert after.value == "charging"
    assert after.context["total"] == 8
    audit = list(AuditEntry.objects.filter(record_id=f"wf:{row.pk}").order_by("id"))
    assert [a.action for a in audit] == ["send_event_dry_run", "send_event"]
    assert audit[1].actor == "ops"
    assert audit[1].reason == "stuck INC-9"
    assert "now in order.charging" in audit[1].outcome


def test_sending_needs_the_change_permission(app: Celery, sqlite_db: str) -> None:
    """A viewer sees the instance but no send button, and posting the form is a 403."""
    orders = _orders(app, "default")
    orders.start("o-5")
    row = _row(orders, "o-5")
    make_user("viewer", "view_workflowinstance")
    client = Client()
    assert client.login(username="viewer", password=PASSWORD)
    page = client.get(f"/admin/xsm_celery/workflowinstance/{row.pk}/change/")
    assert page.status_code == 200
    assert 'id="xsm-send-event"' not in page.content.decode()
    posted = client.post(
        f"/admin/xsm_celery/workflowinstance/{row.pk}/send-event/",
        {"event": "PAY", "reason": "let me", "confirm": "1"},
    )
    assert posted.status_code == 403
    assert orders.get("o-5").value == "created"  # type: ignore[union-attr]


def test_a_stuck_saga_compensation_is_listed_in_the_dead_letter_admin(
    app: Celery, operator: Client
) -> None:
    """compensationFailed writes a dead letter to the Django store, shown by the admin."""
    from xsm_celery.celery import celery_service
    from xsm_celery.celery.workflow.step import Message
    from xsm_celery.engine import MachineLogic, create_machine
    from xsm_celery.patterns import SagaBuilder

    saga = (
        SagaBuilder("fulfil", start_event="START")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard")
    )
    services = {
        name: celery_service(f"shop.{name}")
        for name in ("reserveStock", "releaseStock", "chargeCard")
    }
    machine = create_machine(
        saga.build(), logic=saga.logic().merge(MachineLogic(services=services))
    )
    fulfil = Xsm(app).workflow(machine, store="django", name=f"fulfil_{uuid.uuid4().hex[:6]}")

    def answer(kind: str, data: object) -> None:
        view = fulfil.get("o-9")
        assert view is not None
        [(invoke, task_id)] = view.waiting_for.items()
        fulfil.step(
            "o-9", Message(f"{kind}:{task_id}", kind, invoke=invoke, dispatch=task_id, data=data)
        )

    fulfil.send_now("o-9", "START", order=9)
    answer("done", "reserved")
    answer("error", {"task": "shop.chargeCard", "type": "CardDeclined", "message": "no"})
    answer("error", {"task": "shop.releaseStock", "type": "ConnectionError", "message": "down"})
    view = fulfil.get("o-9")
    assert view is not None
    assert view.value == "compensationFailed"
    record = DjangoDeadLetterStore().list(limit=10)[0]
    assert record.topic == f"workflow:{fulfil.name}:o-9"
    assert record.state_id == "fulfil.compensationFailed"
    page = operator.get("/admin/xsm_celery/deadletterrecord/").content.decode()
    assert "fulfil.compensationFailed" in page or "compensationFailed" in page
