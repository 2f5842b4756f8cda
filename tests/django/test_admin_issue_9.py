"""Admin details: no "Force" on a task record's replay page, task names in the timer list."""

from __future__ import annotations

import time
from typing import Any

from django.urls import reverse

from tests.django.admin_support import task_record
from tests.django.test_admin import app, change_url, login  # noqa: F401 (fixture)
from xsm_celery.django.stores import DjangoTimerStore


def test_a_task_records_replay_page_has_no_force_box(app: Any) -> None:  # noqa: F811
    """Force means nothing for a task replay (its chart restarts), so the form leaves it out."""
    record = task_record(app)
    client = login("ops", "view_deadletterrecord", "replay_deadletterrecord")
    page = client.get(change_url(record.id, "replay")).content.decode()
    assert 'name="reason"' in page
    assert 'name="force"' not in page


def test_the_timer_list_shows_the_task_name(sqlite_db: str) -> None:
    """Each durable timer row names the Celery task it will send."""
    DjangoTimerStore(using=sqlite_db).schedule(
        "t-1", time.time() + 3600, {"task": "shop.refund", "args": [1], "kwargs": {}}
    )
    page = (
        login("ana", superuser=True)
        .get(reverse("admin:xsm_celery_durabletimer_changelist"))
        .content.decode()
    )
    assert "shop.refund" in page
    assert "<th" in page
    assert ">task<" in page.lower() or "column-task_name" in page
