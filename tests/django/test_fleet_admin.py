"""The fleet page of the admin: the same rows as the CLI, read-only without the permission."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse

from tests import services
from tests.django.admin_support import MEMORY_APP
from tests.django.test_admin import login
from xsm_celery.django.models import AuditEntry
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.fleet_store import FleetRedis
from xsm_celery.redis.rate_limit import RedisTokenBucket

URL = "admin:xsm_celery_fleet"


@pytest.fixture
def fleet(sqlite_db: str) -> Iterator[FleetRedis]:
    """The admin's Celery app pointed at the shared Redis, with an open breaker and a bucket."""
    services.require("redis")
    from tests.django.project.celery import memory_app

    store = FleetRedis(services.REDIS_URL, prefix=f"xsm-test-admin-{uuid.uuid4().hex[:8]}:")
    memory_app.conf.xsm_redis_url = services.REDIS_URL
    memory_app.conf.xsm_fleet_prefix = store.prefix
    breaker = FleetBreaker(store, "payments", check_interval_ms=0, failure_threshold=1)
    breaker.record(breaker.admit(), "failure")
    RedisTokenBucket(store, "shop.charge", 5).try_acquire()
    with override_settings(XSM_CELERY={"CELERY_APP": MEMORY_APP}):
        yield store
    del memory_app.conf["xsm_redis_url"]
    del memory_app.conf["xsm_fleet_prefix"]
    keys = list(store.client.scan_iter(match=f"{store.prefix}*", count=500))
    if keys:
        store.client.delete(*keys)


def _state(store: FleetRedis) -> Any:
    return FleetBreaker(store, "payments", check_interval_ms=0, failure_threshold=1).state()


def test_a_viewer_sees_every_key_read_only(fleet: FleetRedis) -> None:
    """A user who may view dead letters sees the open breaker and the bucket, and no form."""
    page = login("vera", "view_deadletterrecord").get(reverse(URL)).content.decode()
    assert "payments" in page
    assert "shop.charge" in page
    assert ">open<" in page
    assert 'name="reason"' not in page
    assert "Read-only" in page


def test_a_viewer_cannot_reset_by_posting(fleet: FleetRedis) -> None:
    """A hand-made POST without the permission is a 403 and the breaker stays open."""
    client = login("vic", "view_deadletterrecord")
    response = client.post(reverse(URL), {"name": "breaker:payments", "reason": "x"})
    assert response.status_code == 403
    assert _state(fleet)["state"] == "open"


def test_a_user_without_view_permission_is_refused(fleet: FleetRedis) -> None:
    """Staff without the dead-letter view permission get a 403."""
    assert login("nora").get(reverse(URL)).status_code == 403


def test_an_operator_resets_with_a_reason_and_it_is_audited(fleet: FleetRedis) -> None:
    """With the permission the form resets the breaker and writes an audit entry."""
    client = login("olga", "view_deadletterrecord", "replay_deadletterrecord")
    assert 'name="reason"' in client.get(reverse(URL)).content.decode()
    response = client.post(
        reverse(URL), {"name": "breaker:payments", "reason": "provider back"}, follow=True
    )
    assert response.status_code == 200
    assert _state(fleet)["state"] == "closed"
    entry = AuditEntry.objects.get(record_id="fleet:breaker:payments")
    assert (entry.action, entry.actor, entry.reason) == ("fleet_reset", "olga", "provider back")


def test_a_reset_without_reason_changes_nothing(fleet: FleetRedis) -> None:
    """An empty reason is refused with a message; nothing is reset or audited."""
    client = login("otto", "view_deadletterrecord", "replay_deadletterrecord")
    page = client.post(reverse(URL), {"name": "breaker:payments", "reason": " "}, follow=True)
    assert "needs the key and a reason" in page.content.decode()
    assert _state(fleet)["state"] == "open"
    assert not AuditEntry.objects.filter(record_id="fleet:breaker:payments").exists()


def test_the_admin_index_and_app_index_link_the_fleet_page(fleet: FleetRedis) -> None:
    """The index and the app's index list the page as a row of the app, view-only for a viewer."""
    client = login("ivan", "view_deadletterrecord")
    link = f'href="{reverse(URL)}"'
    for page in (reverse("admin:index"), reverse("admin:app_list", args=["xsm_celery"])):
        response = client.get(page)
        assert response.status_code == 200
        html = response.content.decode()
        assert link in html
        assert "Fleet breakers and limits" in html
        [app] = [a for a in response.context_data["app_list"] if a["app_label"] == "xsm_celery"]
        [entry] = [m for m in app["models"] if m["object_name"] == "Fleet"]
        assert entry["view_only"] is True
    assert client.get(reverse(URL)).status_code == 200


def test_the_index_entry_follows_the_permissions(fleet: FleetRedis) -> None:
    """An operator's entry is a change link; staff who may not view the page get no entry."""
    operator = login("omar", "view_deadletterrecord", "replay_deadletterrecord")
    response = operator.get(reverse("admin:index"))
    [app] = [a for a in response.context_data["app_list"] if a["app_label"] == "xsm_celery"]
    [entry] = [m for m in app["models"] if m["object_name"] == "Fleet"]
    assert entry["view_only"] is False
    other = login("nina", "view_outboxmessage")
    html = other.get(reverse("admin:index")).content.decode()
    assert "Outbox" in html or "outbox" in html
    assert f'href="{reverse(URL)}"' not in html
