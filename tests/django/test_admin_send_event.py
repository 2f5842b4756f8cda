"""Send event: a dry run then a send say what happened, and only what happened.

A first dry run has no version to compare with, so it must not warn that the instance moved
on; the send after it goes through and says the new state; a send whose dry run is outdated
sends nothing and says why.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from celery import Celery
from django.test import Client

from tests.celery.workflow_charts import order_machine
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.django.models import AuditEntry, WorkflowInstance

MOVED_ON = "moved on"


@pytest.fixture
def orders() -> Iterator[Workflow]:
    """The order workflow on the Django stores; task messages go to the in-memory broker."""
    app = Celery(f"send-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    yield Xsm(app).workflow(
        order_machine("send.charge"), store="django", name=f"orders_{uuid.uuid4().hex[:6]}"
    )
    app.close()


def send_url(orders: Workflow, key: str) -> str:
    row = WorkflowInstance.objects.get(workflow=orders.name, key=key)
    return f"/admin/xsm_celery/workflowinstance/{row.pk}/send-event/"


def hidden(page: str, name: str) -> str:
    """The value of the hidden input ``name`` the dry run filled in."""
    found = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', page)
    assert found is not None, f"no hidden {name} in the page"
    return found.group(1)


def messages_of(page: str) -> str:
    """The text of the page's message list (empty when there is none)."""
    found = re.search(r'<ul class="messagelist">(.*?)</ul>', page, re.S)
    return "" if found is None else found.group(1)


def test_a_dry_run_then_a_send_shows_no_spurious_warning(
    orders: Workflow, operator: Client
) -> None:
    """The form as the page serves it (no version yet): dry run, then send; no warning."""
    orders.start("o-1")
    url = send_url(orders, "o-1")
    form = {"event": "PAY", "payload": '{"total": 8}', "reason": "stuck INC-1"}
    dry = operator.post(url, {**form, "dry_run": "1"}).content.decode()
    assert MOVED_ON not in dry
    assert messages_of(dry) == ""
    assert "order.created -&gt; order.charging" in dry
    assert orders.get("o-1").value == "created"  # type: ignore[union-attr]
    version, send_id = hidden(dry, "version"), hidden(dry, "send_id")
    assert int(version) == orders.get("o-1").version  # type: ignore[union-attr]
    sent = operator.post(
        url, {**form, "version": version, "send_id": send_id, "confirm": "1"}, follow=True
    )
    text = sent.content.decode()
    assert MOVED_ON not in text
    assert "Sent PAY; now in order.charging" in messages_of(text)
    assert orders.get("o-1").value == "charging"  # type: ignore[union-attr]
    actions = [a.action for a in AuditEntry.objects.order_by("id")]
    assert actions == ["send_event_dry_run", "send_event"]


def test_a_send_after_the_instance_moved_on_sends_nothing_and_says_so(
    orders: Workflow, operator: Client
) -> None:
    """The dry run's version is old: nothing is sent, the new plan is shown with both versions."""
    orders.start("o-2")
    url = send_url(orders, "o-2")
    form = {"event": "NOTE", "payload": "", "reason": "count it"}
    dry = operator.post(url, {**form, "dry_run": "1"}).content.decode()
    version = int(hidden(dry, "version"))
    orders.send_now("o-2", "NOTE")
    now = orders.get("o-2")
    assert now is not None
    assert now.version == version + 1
    late = operator.post(
        url, {**form, "version": version, "send_id": hidden(dry, "send_id"), "confirm": "1"}
    ).content.decode()
    said = messages_of(late)
    assert "Nothing was sent" in said
    assert f"version {version}, now {version + 1}" in said
    assert orders.get("o-2").context["events"] == 1  # type: ignore[union-attr]
    assert hidden(late, "version") == str(version + 1)


def test_confirm_without_a_dry_run_sends_nothing(orders: Workflow, operator: Client) -> None:
    """A hand-made confirm with no dry run behind it shows the plan and sends nothing."""
    orders.start("o-3")
    page = operator.post(
        send_url(orders, "o-3"),
        {"event": "PAY", "payload": "{}", "reason": "by hand", "confirm": "1"},
    ).content.decode()
    assert MOVED_ON not in page
    assert "Nothing was sent: check the dry run below" in messages_of(page)
    assert 'id="xsm-plan"' in page
    assert orders.get("o-3").value == "created"  # type: ignore[union-attr]
