"""The dead-letter admin through Django's test client: list, detail, replay, resolve, purge."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from tests.django.admin_support import (
    MEMORY_APP,
    PASSWORD,
    make_user,
    sent_tasks,
    task_record,
)
from xsm_celery.django.admin.dead_letters import short_id
from xsm_celery.django.models import AuditEntry, DeadLetterRecord
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.ids import new_id

CHANGELIST = "admin:xsm_celery_deadletterrecord_changelist"


@pytest.fixture
def app(sqlite_db: str) -> Iterator[Any]:
    """The in-memory Celery app, named in XSM_CELERY, with an empty broker."""
    from tests.django.project.celery import memory_app

    with override_settings(XSM_CELERY={"CELERY_APP": MEMORY_APP}):
        sent_tasks(memory_app)
        yield memory_app


def login(name: str, *perms: str, superuser: bool = False) -> Client:
    """A client logged in as a new user with ``perms``."""
    make_user(name, *perms, superuser=superuser)
    client = Client()
    assert client.login(username=name, password=PASSWORD)
    return client


def change_url(record_id: str, suffix: str = "change") -> str:
    """The admin URL of one record's page (``change``, ``replay``, ``resolve``, ``purge``)."""
    return reverse(f"admin:xsm_celery_deadletterrecord_{suffix}", args=[record_id])


def test_the_list_shows_the_triage_columns(app: Any) -> None:
    """The changelist shows task, reason, attempts, last error, age and resolved."""
    record = task_record(app)
    page = login("ana", superuser=True).get(reverse(CHANGELIST)).content.decode()
    for text in (
        "shop.charge",
        "task exhausted",
        "ConnectionError: payment gateway unreachable",
        short_id(record.id),
        "Age",
        "Resolved",
        "By task",
        "By machine",
        "By taken on",
    ):
        assert text in page


def test_two_dead_letters_of_the_same_millisecond_have_different_short_ids(app: Any) -> None:
    """The list's id column shows the random part, so same-millisecond records differ."""
    now_ms = int(time.time() * 1000)
    first = task_record(app, id=new_id(now_ms))
    second = task_record(app, id=new_id(now_ms))
    assert first.id[:13] == second.id[:13]
    assert short_id(first.id) != short_id(second.id)
    page = login("ida", superuser=True).get(reverse(CHANGELIST)).content.decode()
    assert short_id(first.id) in page
    assert short_id(second.id) in page


@pytest.mark.parametrize(
    ("query", "hit"),
    [("unreachable for order 7", True), ("t-1", True), ("o-42", True), ("nothing-like", False)],
)
def test_search_covers_error_text_task_id_and_subject(app: Any, query: str, hit: bool) -> None:
    """Search finds a record by its error text, task id or envelope subject."""
    record = task_record(app, envelope={"subject": "o-42"})
    page = login("ana", superuser=True).get(reverse(CHANGELIST), {"q": query}).content.decode()
    assert (record.id[:13] in page) is hit


def test_filters_narrow_the_list(app: Any) -> None:
    """The reason and resolved filters keep only matching records."""
    open_ = task_record(app)
    done = task_record(app, reason="non_retryable", resolved_at=5.0)
    client = login("ana", superuser=True)
    page = client.get(reverse(CHANGELIST), {"reason": "non_retryable"}).content.decode()
    assert done.id[:13] in page
    assert open_.id[:13] not in page
    page = client.get(reverse(CHANGELIST), {"resolved": "no"}).content.decode()
    assert open_.id[:13] in page
    assert done.id[:13] not in page


def test_the_detail_page_shows_chain_arguments_diagram_and_audit(app: Any) -> None:
    """The error chain is a table oldest first; args are JSON; the dead state is marked."""
    record = task_record(app)
    page = login("ana", superuser=True).get(change_url(record.id)).content.decode()
    assert page.index("gateway slow") < page.index("payment gateway unreachable for order 7")
    assert '<tr class="xsm-error"><td>1</td><td><code>TimeoutError</code>' in page
    assert "&quot;amount&quot;: 20" in page
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="xsm-chart"' in page
    assert 'class="xsm-state xsm-final xsm-marked" data-state="task.deadLettered"' in page
    assert "Nobody has acted on this dead letter yet." in page


def test_a_replay_is_a_dry_run_first_then_sent_with_a_reason(app: Any) -> None:
    """GET shows what would be sent; POST with a reason sends it, resolves and audits."""
    record = task_record(app)
    client = login("ops", "view_deadletterrecord", "replay_deadletterrecord")
    page = client.get(change_url(record.id, "replay")).content.decode()
    assert "would send shop.charge with args=[7]" in page
    assert "unchanged since capture" in page
    assert sent_tasks(app) == []
    response = client.post(change_url(record.id, "replay"), {"reason": "gateway fixed"})
    assert response.status_code == 302
    assert sent_tasks(app) == [("shop.charge", [7], {"amount": 20})]
    stored = DjangoDeadLetterStore().get(record.id)
    assert stored is not None
    assert stored.resolved_at is not None
    [entry] = AuditEntry.objects.filter(record_id=record.id)
    assert (entry.action, entry.actor, entry.reason) == ("replay", "ops", "gateway fixed")
    assert entry.outcome.startswith("sent shop.charge as task ")


def test_a_replay_without_a_reason_is_not_sent(app: Any) -> None:
    """An empty reason redisplays the form with an error; nothing is sent or audited."""
    record = task_record(app)
    client = login("ops", "view_deadletterrecord", "replay_deadletterrecord")
    response = client.post(change_url(record.id, "replay"), {"reason": "  "})
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert sent_tasks(app) == []
    assert not AuditEntry.objects.exists()


def test_a_changed_chart_is_a_warning_for_a_task_record(app: Any) -> None:
    """A task replay runs the current chart from its start: a changed chart warns, no force."""
    record = task_record(app, machine_hash="0123456789abcdef")
    client = login("ops", "view_deadletterrecord", "replay_deadletterrecord")
    page = client.get(change_url(record.id, "replay")).content.decode()
    assert "runs the current chart from its start" in page
    assert 'name="force"' not in page
    client.post(change_url(record.id, "replay"), {"reason": "new chart is compatible"})
    assert [name for name, _a, _k in sent_tasks(app)] == ["shop.charge"]
    actions = list(AuditEntry.objects.filter(record_id=record.id).values_list("action", flat=True))
    assert actions == ["replay"]


def test_redacted_arguments_are_refused_and_audited(app: Any) -> None:
    """A record whose arguments were masked is not sent with '***' in them."""
    record = task_record(app, task_kwargs={"card_token": "***"})
    client = login("ops", "view_deadletterrecord", "replay_deadletterrecord")
    assert "cannot be replayed" in client.get(change_url(record.id, "replay")).content.decode()
    client.post(change_url(record.id, "replay"), {"reason": "try"})
    assert sent_tasks(app) == []
    assert "redacted arguments" in AuditEntry.objects.get(record_id=record.id).outcome


def test_a_read_only_operator_can_look_but_not_act(app: Any) -> None:
    """View permission alone: no action buttons, and 403 from every action URL and action."""
    record = task_record(app)
    client = login("viewer", "view_deadletterrecord")
    page = client.get(change_url(record.id)).content.decode()
    assert "payment gateway unreachable" in page
    for button in ('id="xsm-replay"', 'id="xsm-resolve"', 'id="xsm-purge"'):
        assert button not in page
    for suffix in ("replay", "resolve", "purge"):
        assert client.get(change_url(record.id, suffix)).status_code == 403
        assert client.post(change_url(record.id, suffix), {"reason": "x" * 5}).status_code == 403
    for action in ("replay_selected", "resolve_selected", "purge_selected"):
        response = client.post(
            reverse(CHANGELIST), {"action": action, "_selected_action": [record.id]}
        )
        assert response.status_code == 403
    bulk = reverse("admin:xsm_celery_deadletterrecord_bulk_replay")
    assert client.post(bulk, {"ids": [record.id], "reason": "sneaky"}).status_code == 403
    assert sent_tasks(app) == []
    assert not AuditEntry.objects.exists()


def test_resolve_needs_a_reason_and_is_audited(app: Any) -> None:
    """Resolving marks the record resolved and writes who and why."""
    record = task_record(app)
    client = login("lead", "view_deadletterrecord", "change_deadletterrecord")
    assert client.post(change_url(record.id, "resolve"), {"reason": ""}).status_code == 200
    assert DeadLetterRecord.objects.get(id=record.id).resolved_at is None
    client.post(change_url(record.id, "resolve"), {"reason": "refunded by hand"})
    assert DeadLetterRecord.objects.get(id=record.id).resolved_at is not None
    entry = AuditEntry.objects.get(record_id=record.id)
    assert (entry.action, entry.actor, entry.reason) == ("resolve", "lead", "refunded by hand")


def test_purge_deletes_and_keeps_the_audit_trail(app: Any) -> None:
    """A purge removes the record and leaves an audit row that outlives it."""
    record = task_record(app)
    client = login("lead", "view_deadletterrecord", "purge_deadletterrecord")
    response = client.post(change_url(record.id, "purge"), {"reason": "retention"})
    assert response.status_code == 302
    assert not DeadLetterRecord.objects.filter(id=record.id).exists()
    assert AuditEntry.objects.get(record_id=record.id).action == "purge"


def test_bulk_actions_go_through_a_confirmation_page(app: Any) -> None:
    """The changelist actions show the selection and ask for a reason before acting."""
    first, second = task_record(app), task_record(app)
    client = login("ana", superuser=True)
    page = client.post(
        reverse(CHANGELIST),
        {
            "action": "purge_selected",
            "_selected_action": [first.id, second.id],
        },
    ).content.decode()
    assert first.id in page
    assert second.id in page
    assert DeadLetterRecord.objects.count() == 2
    client.post(
        reverse("admin:xsm_celery_deadletterrecord_bulk", args=["purge"]),
        {"ids": [first.id, second.id], "reason": "duplicates"},
    )
    assert DeadLetterRecord.objects.count() == 0
    assert AuditEntry.objects.filter(action="purge").count() == 2


def test_bulk_replay_shows_the_dry_run_then_a_summary(app: Any) -> None:
    """Selecting records shows each one's dry run; confirming replays all and summarises."""
    good, masked = task_record(app), task_record(app, task_args=["***"])
    client = login("ana", superuser=True)
    page = client.post(
        reverse(CHANGELIST),
        {
            "action": "replay_selected",
            "_selected_action": [good.id, masked.id],
        },
    ).content.decode()
    assert "would send shop.charge" in page
    assert "redacted arguments" in page
    bulk = reverse("admin:xsm_celery_deadletterrecord_bulk_replay")
    page = client.post(
        bulk, {"ids": [good.id, masked.id], "reason": "gateway fixed"}
    ).content.decode()
    assert "<strong>sent</strong>: 1" in page
    assert "<strong>refused</strong>: 1" in page
    assert len(sent_tasks(app)) == 1


def test_bulk_replay_answers_one_record_as_json(app: Any) -> None:
    """The progress bar's per-record request gets a JSON outcome."""
    record = task_record(app)
    client = login("ana", superuser=True)
    bulk = reverse("admin:xsm_celery_deadletterrecord_bulk_replay")
    body = client.post(bulk, {"ids": [record.id], "reason": "fixed", "format": "json"}).json()
    assert body["results"][0]["status"] == "sent"
    assert body["results"][0]["task_id"]
    assert client.post(bulk, {"ids": [record.id], "format": "json"}).status_code == 400


def test_records_cannot_be_added_edited_or_deleted_through_forms(app: Any) -> None:
    """Even a superuser gets a read-only page: no add, no save, no Django delete."""
    record = task_record(app)
    client = login("ana", superuser=True)
    assert client.get(reverse("admin:xsm_celery_deadletterrecord_add")).status_code == 403
    assert client.get(change_url(record.id, "delete")).status_code == 403
    assert 'name="_save"' not in client.get(change_url(record.id)).content.decode()


def test_the_outbox_page_shows_backlog_age_and_leases(app: Any) -> None:
    """Outbox: pending and sent counts, the oldest pending row's age, rows under lease."""
    from xsm_celery.django.stores import DjangoOutboxStore
    from xsm_celery.eda import Envelope

    outbox = DjangoOutboxStore(wall=lambda: time.time() - 7200)
    seqs = [
        outbox.add("orders", Envelope.new(type="order.paid", subject=f"o-{n}")) for n in range(4)
    ]
    outbox.mark_sent(seqs[:1])
    DjangoOutboxStore().claim(limit=1, owner="relay-a", lease_s=60)
    client = login("ana", superuser=True)
    page = client.get(reverse("admin:xsm_celery_outboxmessage_changelist")).content.decode()
    assert '<strong id="xsm-pending">3</strong>' in page
    assert '<strong id="xsm-sent">1</strong>' in page
    assert '<strong id="xsm-leased">1</strong>' in page
    assert '<strong id="xsm-oldest">2\xa0hours</strong>' in page
    assert "relay-a" in page
    leased = client.get(
        reverse("admin:xsm_celery_outboxmessage_changelist"), {"status": "leased"}
    ).content.decode()
    assert leased.count('class="field-event_type">order.paid<') == 1
    detail = client.get(reverse("admin:xsm_celery_outboxmessage_change", args=[seqs[1]]))
    assert "&quot;type&quot;: &quot;order.paid&quot;" in detail.content.decode()


def test_the_outbox_page_shows_failed_rows_apart(app: Any) -> None:
    """A row set aside after refusals is 'failed', counted apart, filtered, with its error."""
    from xsm_celery.django.stores import DjangoOutboxStore
    from xsm_celery.eda import Envelope

    outbox = DjangoOutboxStore()
    seqs = [
        outbox.add("orders", Envelope.new(type="order.paid", subject=f"o-{n}")) for n in range(3)
    ]
    outbox.claim(limit=1, owner="relay-a", lease_s=60)
    outbox.record_refusal(
        seqs[0], "relay-a", "PreconditionFailed: inequivalent arg", max_attempts=1
    )
    client = login("ana", superuser=True)
    url = reverse("admin:xsm_celery_outboxmessage_changelist")
    page = client.get(url).content.decode()
    assert '<strong id="xsm-pending">2</strong>' in page
    assert '<strong id="xsm-failed">1</strong>' in page
    failed = client.get(url, {"status": "failed"}).content.decode()
    assert failed.count('class="field-event_type">order.paid<') == 1
    assert ">failed<" in failed
    pending = client.get(url, {"status": "pending"}).content.decode()
    assert pending.count('class="field-event_type">order.paid<') == 2
    detail = client.get(reverse("admin:xsm_celery_outboxmessage_change", args=[seqs[0]]))
    assert "PreconditionFailed: inequivalent arg" in detail.content.decode()


def test_a_failed_outbox_row_is_requeued_from_the_admin_and_audited(app: Any) -> None:
    """The requeue action needs the change permission, makes the row pending, audits it."""
    from xsm_celery.django.stores import DjangoOutboxStore
    from xsm_celery.eda import Envelope

    outbox = DjangoOutboxStore()
    seqs = [
        outbox.add("orders", Envelope.new(type="order.paid", subject=f"o-{n}")) for n in range(2)
    ]
    outbox.claim(limit=2, owner="relay-a", lease_s=60)
    outbox.record_refusal(seqs[0], "relay-a", "refused", max_attempts=1)
    url = reverse("admin:xsm_celery_outboxmessage_changelist")
    form = {"action": "requeue_failed", "_selected_action": [str(s) for s in seqs]}
    viewer = login("viewer", "view_outboxmessage")
    assert "requeue_failed" not in viewer.get(url).content.decode()
    viewer.post(url, form)
    assert outbox.count(failed_only=True) == 1, "view permission alone changes nothing"
    operator = login("ops", "view_outboxmessage", "change_outboxmessage")
    assert "requeue_failed" in operator.get(url).content.decode()
    page = operator.post(url, form, follow=True).content.decode()
    assert "1 failed row(s) requeued." in page
    assert outbox.count(failed_only=True) == 0
    assert [r.seq for r in outbox.pending()] == seqs
    [entry] = AuditEntry.objects.filter(action="requeue_outbox")
    assert (entry.record_id, entry.actor) == (f"outbox:{seqs[0]}", "ops")


def test_the_other_tables_are_listed_read_only(app: Any) -> None:
    """Audit trail, inbox, snapshots and timers list their rows and offer no add button."""
    from xsm_celery.django.stores import DjangoInbox, DjangoSnapshotStore, DjangoTimerStore

    DjangoInbox().claim("src", "e-1", "fp", ttl_s=None)
    DjangoSnapshotStore().save("order-9", '{"value": "paid"}')
    DjangoTimerStore().schedule("task-1", time.time() + 60, {"task": "shop.charge"})
    DjangoDeadLetterStore().audit(
        "r-1", "purge", actor="ana", reason="retention", outcome="deleted"
    )
    client = login("ana", superuser=True)
    for model, text in (
        ("inboxrecord", "e-1"),
        ("machinesnapshot", "order-9"),
        ("durabletimer", "task-1"),
        ("auditentry", "retention"),
    ):
        page = client.get(reverse(f"admin:xsm_celery_{model}_changelist")).content.decode()
        assert text in page
        assert client.get(reverse(f"admin:xsm_celery_{model}_add")).status_code == 403
