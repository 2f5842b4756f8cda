"""Admin of the tables: dead letters (triage), audit trail, outbox, inbox, snapshots, timers.

Everything but the dead-letter actions (and requeueing a failed outbox row) is read-only:
these tables are written by workers, relays and scanners, and an edit by hand would break
what they rely on. The exact epoch-seconds columns stay off the pages: each date is shown
once, in the one format of ``admin_date``.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar, cast

from django.contrib import admin, messages
from django.db.models import Min, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _

from xsm_celery.django.admin import fleet as fleet_admin
from xsm_celery.django.admin.dead_letters import DeadLetterRecordAdmin
from xsm_celery.django.admin.instances import WorkflowInstanceAdmin
from xsm_celery.django.admin.status import register_status_page
from xsm_celery.django.models import (
    AuditEntry,
    DeadLetterRecord,
    DurableTimer,
    InboxRecord,
    MachineSnapshot,
    OutboxMessage,
    WorkflowInstance,
)
from xsm_celery.django.templatetags.xsm_celery_admin import admin_date, epoch_age, pretty_json

__all__ = [
    "REQUEUE_OUTBOX_ACTION",
    "AuditEntryAdmin",
    "DurableTimerAdmin",
    "InboxRecordAdmin",
    "MachineSnapshotAdmin",
    "OutboxMessageAdmin",
    "OutboxStatusFilter",
    "ReadOnlyAdmin",
    "outbox_stats",
]

#: The audit action of a failed outbox row made pending again from the admin.
REQUEUE_OUTBOX_ACTION = "requeue_outbox"

admin.site.register(DeadLetterRecord, DeadLetterRecordAdmin)
fleet_admin.register(admin.site)
admin.site.register(WorkflowInstance, WorkflowInstanceAdmin)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An admin that shows rows and never changes them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Who did what to which dead letter, and how it went."""

    list_display = ("created", "action", "actor", "record_id", "reason", "outcome")
    list_filter = ("action", "actor", "created")
    search_fields = ("record_id", "reason", "outcome", "actor")
    date_hierarchy = "created"
    exclude = ("at",)


class OutboxStatusFilter(admin.SimpleListFilter):
    """Pending, sent, pending under a relay's live lease, or failed (set aside)."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("pending", _("Pending")),
            ("leased", _("Under lease")),
            ("sent", _("Sent")),
            ("failed", _("Failed")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        pending = queryset.filter(sent_at__isnull=True, failed_at__isnull=True)
        if self.value() == "pending":
            return pending
        if self.value() == "leased":
            return pending.filter(claimed_until__gt=time.time())
        if self.value() == "failed":
            return queryset.filter(sent_at__isnull=True, failed_at__isnull=False)
        if self.value() == "sent":
            return queryset.filter(sent_at__isnull=False)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    """Outbox rows, with the backlog figures the seed's operations table alerts on."""

    list_display = (
        "seq",
        "event_type",
        "topic",
        "subject",
        "status",
        "attempts",
        "age",
        "claimed_by",
        "lease_left",
    )
    list_filter = (OutboxStatusFilter, "topic")
    search_fields = ("envelope_id", "subject", "event_type")
    readonly_fields = ("envelope_json", "sent_on", "lease_until", "failed_on")
    exclude = ("envelope", "created_at", "sent_at", "claimed_until", "failed_at")
    change_list_template = "admin/xsm_celery/outboxmessage/change_list.html"
    actions = ("requeue_failed",)

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("xsm_celery/admin.css",)}

    @admin.display(description=_("status"))
    def status(self, obj: OutboxMessage) -> str:
        if obj.sent_at is not None:
            return str(_("sent"))
        if obj.failed_at is not None:
            return str(_("failed"))
        if obj.claimed_until is not None and obj.claimed_until > time.time():
            return str(_("leased"))
        return str(_("pending"))

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        """Requeueing changes rows: it needs the model's change permission."""
        return bool(cast(Any, request.user).has_perm("xsm_celery.change_outboxmessage"))

    @admin.action(description=_("Requeue selected failed rows"), permissions=["requeue"])
    def requeue_failed(self, request: HttpRequest, queryset: QuerySet[OutboxMessage]) -> None:
        """Make failed rows pending again (attempts reset), once their cause is fixed; audited."""
        from xsm_celery.django.stores import DjangoOutboxStore
        from xsm_celery.django.stores.dates import to_datetime

        store = DjangoOutboxStore(using=queryset.db)
        failed = queryset.filter(sent_at__isnull=True, failed_at__isnull=False)
        done = [seq for seq in failed.values_list("seq", flat=True) if store.requeue(seq)]
        now, actor = time.time(), str(request.user.get_username()) or "anonymous"
        AuditEntry.objects.using(queryset.db).bulk_create(
            AuditEntry(
                record_id=f"outbox:{seq}",
                action=REQUEUE_OUTBOX_ACTION,
                actor=actor,
                reason="requeued from the admin",
                outcome="pending again, attempts 0",
                at=now,
                created=to_datetime(now),
            )
            for seq in done
        )
        level = messages.SUCCESS if done else messages.WARNING
        self.message_user(request, _("%(n)d failed row(s) requeued.") % {"n": len(done)}, level)

    @admin.display(description=_("age"), ordering="-created_at")
    def age(self, obj: OutboxMessage) -> str:
        return epoch_age(obj.created_at)

    @admin.display(description=_("lease left"))
    def lease_left(self, obj: OutboxMessage) -> str:
        if obj.sent_at is not None or obj.claimed_until is None:
            return ""
        left = obj.claimed_until - time.time()
        return f"{left:.0f} s" if left > 0 else str(_("expired"))

    @admin.display(description=_("sent"))
    def sent_on(self, obj: OutboxMessage) -> str:
        return admin_date(obj.sent_at) or str(_("not yet"))

    @admin.display(description=_("lease until"))
    def lease_until(self, obj: OutboxMessage) -> str:
        return admin_date(obj.claimed_until)

    @admin.display(description=_("failed"))
    def failed_on(self, obj: OutboxMessage) -> str:
        return admin_date(obj.failed_at)

    @admin.display(description=_("envelope"))
    def envelope_json(self, obj: OutboxMessage) -> SafeString:
        return _pre_json(obj.envelope)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, headed by pending and sent counts, oldest pending age and leased rows."""
        extra = dict(extra_context or {})
        extra["outbox_stats"] = outbox_stats(self.get_queryset(request))
        return super().changelist_view(request, extra)


def _pre_json(text: str) -> SafeString:
    """Stored JSON text, indented, in a ``<pre>`` (escaped; shown as is if not JSON)."""
    try:
        shown = pretty_json(json.loads(text))
    except ValueError:
        shown = text
    return format_html('<pre class="xsm-json">{}</pre>', shown)


def outbox_stats(rows: QuerySet[OutboxMessage]) -> dict[str, Any]:
    """Pending, sent, leased and failed counts, and the age of the oldest pending row."""
    now = time.time()
    pending = rows.filter(sent_at__isnull=True, failed_at__isnull=True)
    oldest = pending.aggregate(oldest=Min("created_at"))["oldest"]
    oldest_created = pending.aggregate(oldest=Min("created"))["oldest"]
    return {
        "pending": pending.count(),
        "sent": rows.filter(sent_at__isnull=False).count(),
        "leased": pending.filter(claimed_until__gt=now).count(),
        "failed": rows.filter(sent_at__isnull=True, failed_at__isnull=False).count(),
        "oldest_pending_s": None if oldest is None else max(0.0, now - oldest),
        "oldest_pending_age": "" if oldest_created is None else timesince(oldest_created),
    }


@admin.register(InboxRecord)
class InboxRecordAdmin(ReadOnlyAdmin):
    """Idempotency keys consumers have seen."""

    list_display = ("scope", "key", "in_flight", "expires", "created")
    search_fields = ("scope", "key")
    list_filter = ("scope",)
    readonly_fields = ("expires_on",)
    exclude = ("expires_at",)

    @admin.display(description=_("expires on"))
    def expires_on(self, obj: InboxRecord) -> str:
        return admin_date(obj.expires_at) or str(_("never"))

    @admin.display(description=_("in flight"), boolean=True)
    def in_flight(self, obj: InboxRecord) -> bool:
        return obj.receipt is None

    @admin.display(description=_("expires"), ordering="expires_at")
    def expires(self, obj: InboxRecord) -> str:
        if obj.expires_at is None:
            return str(_("never"))
        left = obj.expires_at - time.time()
        return f"in {left:.0f} s" if left > 0 else str(_("expired"))


@admin.register(MachineSnapshot)
class MachineSnapshotAdmin(ReadOnlyAdmin):
    """Saved machine instances."""

    list_display = ("key", "version", "machine_version", "updated")
    search_fields = ("key",)
    date_hierarchy = "updated"
    readonly_fields = ("snapshot_json",)
    exclude = ("snapshot", "updated_at")

    @admin.display(description=_("snapshot"))
    def snapshot_json(self, obj: MachineSnapshot) -> SafeString:
        return _pre_json(obj.snapshot)


@admin.register(DurableTimer)
class DurableTimerAdmin(ReadOnlyAdmin):
    """Durable timers waiting for the scanner."""

    list_display = ("id", "task_name", "key", "due", "overdue", "claimed_by")
    search_fields = ("key", "id")
    date_hierarchy = "due"
    readonly_fields = ("lease_until", "payload_json")
    exclude = ("due_at", "claimed_until", "payload")

    @admin.display(description=_("payload"))
    def payload_json(self, obj: DurableTimer) -> SafeString:
        """The message the timer sends, as indented JSON (the data it carries, verbatim)."""
        return format_html('<pre class="xsm-json">{}</pre>', pretty_json(obj.payload))

    @admin.display(description=_("lease until"))
    def lease_until(self, obj: DurableTimer) -> str:
        return admin_date(obj.claimed_until)

    @admin.display(description=_("task"))
    def task_name(self, obj: DurableTimer) -> str:
        """The Celery task the timer will send (from its payload), or an empty cell."""
        payload = obj.payload if isinstance(obj.payload, dict) else {}
        return str(payload.get("task") or "")

    @admin.display(description=_("overdue"), boolean=True)
    def overdue(self, obj: DurableTimer) -> bool:
        return obj.due_at <= time.time()


register_status_page(admin.site)
