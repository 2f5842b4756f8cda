"""The workflow instances admin in headless Chromium: find a stuck order, unstick it.

An order waits in ``charging`` for a payment task that will never answer. The operator
searches the list for it, reads its page (diagram with the active state marked, the task it
waits for, the transitions), picks ``CANCEL`` from the events the state accepts, reads the dry
run, sends it with a reason, and sees the new state and the audit row. Screenshots go to
``artifacts/django-admin/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tests.celery.workflow_charts import order_machine
from tests.django.admin_support import make_user
from tests.django.test_browser import SHOTS, admin_server, chromium_browser, log_in
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.django.models import WorkflowInstance
from xsm_celery.django.stores import DjangoDeadLetterStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["admin_server", "chromium_browser"]


@pytest.fixture
def orders(sqlite_db: str) -> Iterator[Workflow]:
    """An order workflow on the Django stores; task messages go to the in-memory broker."""
    app = Celery(f"wf-browser-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.xsm_dead_letter_store = DjangoDeadLetterStore()
    yield Xsm(app).workflow(order_machine("shop.charge"), store="django", name="shop_orders")
    app.close()


def test_an_operator_unsticks_an_order_with_an_event(
    admin_server: str, chromium_browser: Any, orders: Workflow
) -> None:
    """Search, read the instance, dry-run CANCEL, send it with a reason, see it audited."""
    orders.start("o-100")
    orders.send_now("o-stuck", "PAY", total=70)
    make_user("ana", superuser=True)
    page = log_in(chromium_browser, admin_server, "ana")
    page.goto(f"{admin_server}/admin/xsm_celery/workflowinstance/")
    assert page.locator("#result_list tbody tr").count() == 2
    page.fill("#searchbar", "stuck")
    page.press("#searchbar", "Enter")
    page.wait_for_url("**/?q=stuck")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "order.charging" in page.locator("#result_list tbody tr").inner_text()
    page.screenshot(path=str(SHOTS / "wf-1-list.png"), full_page=True)

    page.locator("#result_list tbody tr a").first.click()
    page.wait_for_selector("#xsm-diagram svg")
    assert page.locator("#xsm-diagram svg .xsm-marked").get_attribute("data-state") == (
        "order.charging"
    )
    assert "charge" in page.locator("#xsm-waiting").inner_text()
    assert page.locator("#xsm-transitions tr.xsm-transition").count() == 2
    page.screenshot(path=str(SHOTS / "wf-2-detail.png"), full_page=True)

    page.click("#xsm-send-event")
    page.wait_for_selector("#xsm-send-form")
    options = page.locator("#id_event option").all_inner_texts()
    assert options == ["CANCEL"]
    assert page.locator("input[name=confirm]").count() == 0
    page.fill("#id_reason", "gateway lost the charge (INC-7)")
    page.click("input[name=dry_run]")
    page.wait_for_selector("#xsm-plan")
    assert "order.charging -> order.cancelled" in page.locator("#xsm-plan").inner_text()
    page.screenshot(path=str(SHOTS / "wf-3-dry-run.png"), full_page=True)
    view = orders.get("o-stuck")
    assert view is not None
    assert view.value == "charging"

    page.click("input[name=confirm]")
    page.wait_for_selector(".messagelist .success")
    audit = page.locator("#xsm-audit tr.xsm-audit-row")
    assert audit.count() == 2
    assert "gateway lost the charge (INC-7)" in audit.last.inner_text()
    page.screenshot(path=str(SHOTS / "wf-4-sent.png"), full_page=True)
    row = WorkflowInstance.objects.get(workflow="shop_orders", key="o-stuck")
    assert row.state == "order.cancelled"
    assert row.status == "done"
