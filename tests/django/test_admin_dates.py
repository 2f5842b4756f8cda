"""Every admin page shows a date one way: formatted, never as raw epoch seconds.

Rows are written in every table of the app by a real workflow (instance, snapshot, transitions,
outbox, durable timer, inbox) and the dead-letter store (record, audit); then every list, every
detail page and the operator pages are read. JSON shown verbatim as evidence (a record's event
or snapshot, an envelope) is data, not a date the page shows, so ``<pre>`` blocks are left out.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid

from celery import Celery
from django.apps import apps
from django.test import Client
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.timezone import localtime

from tests.celery.workflow_charts import order_machine
from tests.contract_dead_letters import make_record
from xsm_celery.celery import Xsm
from xsm_celery.django.models import DeadLetterRecord, WorkflowInstance
from xsm_celery.django.operations import DeadLetterOperations
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.django.templatetags.xsm_celery_admin import admin_date, epoch_date

#: Epoch seconds of this century's first decades (2001 to 2033), with or without a fraction.
EPOCH = re.compile(r"(?<![\w.])1[0-9]{9}(?:\.[0-9]+)?(?![\w.])")
EVIDENCE = re.compile(r"<pre\b.*?</pre>|<script\b.*?</script>", re.S)


def _fill_every_table() -> None:
    app = Celery(f"dates-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.xsm_timer_countdown_max_s = 1.0
    orders = Xsm(app).workflow(
        order_machine("dates.charge"),
        store="django",
        name=f"orders_{uuid.uuid4().hex[:6]}",
        outbox_topic="orders",
    )
    orders.start("o-1")
    orders.send_now("o-1", "NOTE", event_id="note-1")
    orders.send_now("o-2", "PAY", total=5)
    store = DjangoDeadLetterStore()
    record = make_record(taken_at=time.time(), resolved_at=None)
    store.put(record)
    DeadLetterOperations(store).resolve(record.id, actor="ops", reason="handled by hand")
    app.close()


def _shown(page: str) -> str:
    return EVIDENCE.sub("", page)


def _pages(client: Client) -> dict[str, str]:
    """Every list and detail page of the app, the status page, and send event / replay."""
    found: dict[str, str] = {}
    for model in apps.get_app_config("xsm_celery").get_models():
        name = model._meta.model_name
        changelist = f"admin:xsm_celery_{name}_changelist"
        try:
            url = reverse(changelist)
        except Exception:
            continue
        found[url] = client.get(url).content.decode()
        for row in model.objects.all()[:3]:
            detail = reverse(f"admin:xsm_celery_{name}_change", args=[row.pk])
            found[detail] = client.get(detail).content.decode()
    instance = WorkflowInstance.objects.first()
    assert instance is not None
    send = reverse("admin:xsm_celery_workflowinstance_send_event", args=[instance.pk])
    found[send] = client.get(send).content.decode()
    record = DeadLetterRecord.objects.first()
    assert record is not None
    replay = reverse("admin:xsm_celery_deadletterrecord_replay", args=[record.pk])
    found[replay] = client.get(replay).content.decode()
    found["/admin/xsm_celery/status/"] = client.get("/admin/xsm_celery/status/").content.decode()
    return found


def test_no_admin_page_shows_an_epoch_number(operator: Client) -> None:
    """Lists, detail pages and operator pages show no raw epoch seconds and no epoch row."""
    _fill_every_table()
    pages = _pages(operator)
    assert len(pages) >= 15
    for url, page in pages.items():
        shown = _shown(page)
        assert "(epoch s)" not in shown, url
        assert EPOCH.findall(shown) == [], url


def test_the_instance_page_shows_its_update_once_in_the_admin_format(operator: Client) -> None:
    """The instance page has one 'Updated' row, in the format every other date uses."""
    _fill_every_table()
    row = WorkflowInstance.objects.get(key="o-1")
    page = _shown(
        operator.get(f"/admin/xsm_celery/workflowinstance/{row.pk}/change/").content.decode()
    )
    assert page.count("Updated at") == 0
    assert admin_date(row.updated) in page
    assert admin_date(row.updated_at) == admin_date(row.updated)


def test_admin_date_reads_epoch_seconds_and_datetimes_alike() -> None:
    """One format: epoch seconds and the datetime of the same instant print the same."""
    when = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)
    assert admin_date(when.timestamp()) == admin_date(when)
    assert admin_date(when) == date_format(localtime(when), "DATETIME_FORMAT")
    assert admin_date(None) == ""
    assert epoch_date(when.timestamp()).startswith(admin_date(when) + " (")
