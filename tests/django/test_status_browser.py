"""The admin status page in headless Chromium: an operator finds it on the index and reads it.

The stores hold a dead letter from a minute ago and one from yesterday morning, an unsent
outbox row, an overdue durable timer and two persisted instances. An operator who may view
dead letters opens the page from the admin index and reads each figure; a staff user without
that permission sees no link. Screenshots go to ``artifacts/django-admin/``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.contract_dead_letters import make_record
from tests.django.admin_support import make_user
from tests.django.test_browser import SHOTS, admin_server, chromium_browser, log_in
from xsm_celery.django.stores import (
    DjangoDeadLetterStore,
    DjangoOutboxStore,
    DjangoSnapshotStore,
    DjangoTimerStore,
)
from xsm_celery.eda import Envelope

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["admin_server", "chromium_browser"]


def _seed() -> None:
    now = time.time()
    dead_letters = DjangoDeadLetterStore()
    dead_letters.put(make_record(reason="worker_lost", taken_at=now - 60))
    dead_letters.put(make_record(reason="max_attempts", taken_at=now - 5 * 3600))
    DjangoOutboxStore().add("orders", Envelope.new(type="order.paid", subject="o-1"))
    DjangoTimerStore().schedule("job", now - 30, {})
    snapshots = DjangoSnapshotStore()
    snapshots.save("d1", '{"machine_id": "door", "state_ids": ["door.open"]}')
    snapshots.save("d2", '{"machine_id": "door", "state_ids": ["door.open"]}')


def _cells(page: Any, table: str) -> list[list[str]]:
    rows = page.locator(f"#{table} tbody tr")
    return [
        [cell.strip() for cell in rows.nth(i).locator("th, td").all_inner_texts()]
        for i in range(rows.count())
    ]


def test_an_operator_opens_the_status_page_from_the_index(
    admin_server: str, chromium_browser: Any
) -> None:
    """The index links the page; its tables show what the stores hold."""
    _seed()
    make_user("vera", "view_deadletterrecord")
    page = log_in(chromium_browser, admin_server, "vera")
    page.get_by_role("link", name="Status").first.click()
    page.wait_for_url("**/admin/xsm_celery/status/")
    page.screenshot(path=str(SHOTS / "status-1-page.png"), full_page=True)

    assert _cells(page, "xsm-dead-letters") == [
        ["max_attempts", "0", "1"],
        ["worker_lost", "1", "1"],
    ]
    outbox, timers = _cells(page, "xsm-waiting")
    assert outbox[:2] == ["Outbox rows", "1"]
    assert timers[:2] == ["Durable timers", "1"]
    assert float(timers[2]) >= 29.0
    assert _cells(page, "xsm-instances") == [["door", "open", "2"]]
    assert page.locator(".errornote").count() == 0


def test_a_user_without_the_permission_sees_no_link(
    admin_server: str, chromium_browser: Any
) -> None:
    """Staff without the dead-letter view permission get no link and a 403 at the URL."""
    make_user("wim")
    page = log_in(chromium_browser, admin_server, "wim")
    assert page.get_by_role("link", name="Status").count() == 0
    answer = page.goto(f"{admin_server}/admin/xsm_celery/status/")
    assert answer is not None
    assert answer.status == 403
