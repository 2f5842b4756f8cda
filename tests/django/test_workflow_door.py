"""Bad input at the Django door of workflows: unmigrated tables, and the admin's send form.

A workflow store whose tables were never created answers ``ConfigurationError`` naming
``python manage.py migrate`` on SQLite and PostgreSQL, not a busy key or a raw database error.
The admin's "Send event" form passes the payload whole as the event's data (an ``event_id``
key included) and audits a send the inbox answered as a duplicate as exactly that. Steps run
in this process; the admin is driven with Django's test client.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from django.apps import apps
from django.db import connections
from django.test import Client

from tests.celery.workflow_charts import order_machine
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.celery.workflow.step import Message
from xsm_celery.django.models import AuditEntry, WorkflowInstance
from xsm_celery.django.stores import DjangoInbox, DjangoSnapshotStore, DjangoTimerStore
from xsm_celery.errors import ConfigurationError, LockTimeoutError, StoreError


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app on the in-memory broker."""
    celery = Celery(f"wf-door-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    celery.conf.xsm_timer_countdown_max_s = 5.0
    yield celery
    celery.close()


def _orders(app: Celery, alias: str) -> Workflow:
    store = "django" if alias == "default" else f"django://{alias}"
    return Xsm(app).workflow(
        order_machine("wf_door.charge"), store=store, name=f"orders_{uuid.uuid4().hex[:6]}"
    )


# Tables never migrated


@pytest.fixture
def unmigrated(db_alias: str) -> Iterator[str]:
    """The database ``db_alias`` with the app's tables renamed away, as if never migrated."""
    connection = connections[db_alias]
    tables = [m._meta.db_table for m in apps.get_app_config("xsm_celery").get_models()]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ALTER TABLE {quote(table)} RENAME TO {quote(table + '_away')}")
    try:
        yield db_alias
    finally:
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"ALTER TABLE {quote(table + '_away')} RENAME TO {quote(table)}")


def test_a_workflow_on_unmigrated_tables_says_run_migrate(app: Celery, unmigrated: str) -> None:
    """start(), send_now() and get() answer ConfigurationError naming the migrate command."""
    orders = _orders(app, unmigrated)
    calls = [
        lambda: orders.start("o-1"),
        lambda: orders.send_now("o-1", "NOTE"),
        lambda: orders.get("o-1"),
    ]
    for call in calls:
        with pytest.raises(ConfigurationError, match=r"python manage\.py migrate") as caught:
            call()
        assert not isinstance(caught.value, LockTimeoutError)
        assert isinstance(caught.value, StoreError)
        assert f"database {unmigrated!r}" in str(caught.value)


def test_each_workflow_store_maps_a_missing_table_itself(unmigrated: str) -> None:
    """The snapshot lock and load, the inbox and the timer store each name the fix."""
    snapshots = DjangoSnapshotStore(using=unmigrated)
    inbox = DjangoInbox(using=unmigrated)
    timers = DjangoTimerStore(using=unmigrated)

    def locked_load() -> None:
        """SQLite fails taking its write lock (an UPDATE); PostgreSQL's advisory lock at load."""
        with snapshots.lock("orders:o-1", timeout=0.2):
            snapshots.load("orders:o-1")

    calls: list[Any] = [
        locked_load,
        lambda: snapshots.load("orders:o-1"),
        lambda: inbox.get("orders:o-1", "evt-1"),
        timers.count,
    ]
    for call in calls:
        with pytest.raises(ConfigurationError, match=r"python manage\.py migrate"):
            call()


# The admin's "Send event" form


def _send_url(orders: Workflow, key: str) -> str:
    row = WorkflowInstance.objects.get(workflow=orders.name, key=key)
    return f"/admin/xsm_celery/workflowinstance/{row.pk}/send-event/"


def _audit(orders: Workflow, key: str) -> list[AuditEntry]:
    row = WorkflowInstance.objects.get(workflow=orders.name, key=key)
    return list(AuditEntry.objects.filter(record_id=f"wf:{row.pk}").order_by("id"))


def _confirm(client: Client, orders: Workflow, key: str, payload: str) -> Any:
    view = orders.get(key)
    assert view is not None
    return client.post(
        _send_url(orders, key),
        {
            "event": "NOTE",
            "payload": payload,
            "reason": "fix INC-7",
            "version": view.version,
            "confirm": "1",
        },
    )


def test_an_event_id_in_the_payload_is_data_not_the_dedup_id(app: Celery, operator: Client) -> None:
    """Two sends whose payloads both hold event_id "same" are two steps, both audited as sent."""
    orders = _orders(app, "default")
    orders.start("o-2")
    for _ in range(2):
        sent = _confirm(operator, orders, "o-2", '{"event_id": "same", "note": 1}')
        assert sent.status_code == 302
    view = orders.get("o-2")
    assert view is not None
    assert view.context["events"] == 2
    assert DjangoInbox().get(orders.store_key("o-2"), "same") is None
    assert [a.action for a in _audit(orders, "o-2")] == ["send_event", "send_event"]


def test_a_send_answered_as_duplicate_is_audited_and_shown_as_such(
    app: Celery, operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dry run's send id applied by a racing click makes this send a no-op, said so."""
    orders = _orders(app, "default")
    orders.start("o-3")
    view = orders.get("o-3")
    assert view is not None
    url = _send_url(orders, "o-3")
    dry = operator.post(
        url,
        {
            "event": "NOTE",
            "payload": "{}",
            "reason": "fix INC-8",
            "version": view.version,
            "dry_run": "1",
        },
    ).content.decode()
    found = re.search(r'name="send_id" value="([^"]+)"', dry)
    assert found is not None
    send_id = found.group(1)
    real_step = orders.step

    def racing_click(key: str, message: Message) -> Any:
        """The other click of a double submit commits the same send id first."""
        assert message.id == send_id
        real_step(key, message)
        return real_step(key, message)

    monkeypatch.setattr(orders, "step", racing_click)
    sent = operator.post(
        url,
        {
            "event": "NOTE",
            "payload": "{}",
            "reason": "fix INC-8",
            "version": view.version,
            "send_id": send_id,
            "confirm": "1",
        },
        follow=True,
    ).content.decode()
    after = orders.get("o-3")
    assert after is not None
    assert after.context["events"] == 1
    audit = _audit(orders, "o-3")
    assert [a.action for a in audit] == ["send_event_dry_run", "send_event_duplicate"]
    assert "duplicate" in audit[1].outcome
    assert "nothing changed" in audit[1].outcome
    assert "nothing changed" in sent


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ("[" * 5_000 + "]" * 5_000, "nested too deeply"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested more than 32"),
    ],
)
def test_a_deeply_nested_payload_is_a_form_error_not_a_server_error(
    app: Celery, operator: Client, payload: str, error: str
) -> None:
    """Any depth answers the form again with an error; nothing is sent or audited as sent."""
    orders = _orders(app, "default")
    orders.start("o-4")
    page = _confirm(operator, orders, "o-4", payload)
    assert page.status_code == 200
    assert error in page.content.decode()
    assert orders.get("o-4").context["events"] == 0  # type: ignore[union-attr]
    assert _audit(orders, "o-4") == []
