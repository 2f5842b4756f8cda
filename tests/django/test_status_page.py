"""The figures' read methods on the Django stores, and the admin status page."""

from __future__ import annotations

import time

from django.test import Client
from django.urls import reverse

from tests.contract_dead_letters import make_record
from tests.django.admin_support import PASSWORD, make_user
from tests.figures_contract import (
    FakeWall,
    check_dead_letters_by_reason,
    check_oldest_pending,
    check_timers,
)
from xsm_celery.django.stores import (
    DjangoDeadLetterStore,
    DjangoOutboxStore,
    DjangoSnapshotStore,
    DjangoTimerStore,
)
from xsm_celery.eda import Envelope


def test_dead_letters_by_reason(db_alias: str) -> None:
    """The Django dead-letter store counts by reason since a time."""
    check_dead_letters_by_reason(DjangoDeadLetterStore(using=db_alias))


def test_outbox_oldest_pending(db_alias: str) -> None:
    """The Django outbox reports its oldest unsent row."""
    wall = FakeWall()
    check_oldest_pending(DjangoOutboxStore(using=db_alias, wall=wall), wall)


def test_timers(db_alias: str) -> None:
    """The Django timer store reports its count and earliest due time."""
    check_timers(DjangoTimerStore(using=db_alias))


def _client(name: str, *perms: str) -> Client:
    make_user(name, *perms)
    client = Client()
    assert client.login(username=name, password=PASSWORD)
    return client


def test_the_status_page_shows_the_figures(sqlite_db: str) -> None:
    """Dead letters by reason, the outbox backlog, timers and instances appear on the page."""
    now = time.time()
    DjangoDeadLetterStore().put(make_record(reason="worker_lost", taken_at=now - 60))
    DjangoOutboxStore().add("orders", Envelope.new(type="order.paid", subject="o-1"))
    DjangoTimerStore().schedule("job", now - 30, {})
    DjangoSnapshotStore().save("d1", '{"machine_id": "door", "state_ids": ["door.open"]}')
    page = _client("olga", "view_deadletterrecord").get(reverse("admin:xsm_celery_status"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "<code>worker_lost</code></td><td>1</td><td>1</td>" in html
    assert '<tr id="xsm-outbox"><th>Outbox rows</th><td>1</td>' in html
    assert '<tr id="xsm-timers"><th>Durable timers</th><td>1</td>' in html
    assert "<td><code>door</code></td><td><code>open</code></td><td>1</td>" in html


def test_the_status_page_needs_the_view_permission(sqlite_db: str) -> None:
    """A staff user without the permission to view dead letters gets a 403."""
    page = _client("piotr").get(reverse("admin:xsm_celery_status"))
    assert page.status_code == 403
