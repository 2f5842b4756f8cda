"""``DeadLetterRecordAdmin``: list, filter, search and open dead letters, and act on them.

Records are evidence, so no form edits them: the change page is read-only for everyone,
and the admin's own delete is replaced by the audited purge. Acting needs its own
permission: ``replay_deadletterrecord`` to replay, ``purge_deadletterrecord`` to purge and
``change_deadletterrecord`` to resolve; ``view_deadletterrecord`` alone is a read-only
operator, who sees no action button and gets 403 from every action URL.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince
from django.utils.translation import gettext_lazy as _

from xsm_celery.charttools.svg import render_chart_svg
from xsm_celery.django.admin import views
from xsm_celery.django.charts import find_chart
from xsm_celery.django.conf import get_settings
from xsm_celery.django.models import AuditEntry, DeadLetterRecord
from xsm_celery.django.operations import DeadLetterOperations
from xsm_celery.django.stores.dead_letters import DjangoDeadLetterStore, row_to_record
from xsm_celery.django.templatetags.xsm_celery_admin import admin_date
from xsm_celery.patterns.dead_letter import DeadLetterReason
from xsm_celery.patterns.dead_letter.workflow import workflow_of_record

__all__ = ["DeadLetterRecordAdmin", "ReasonFilter", "ResolvedFilter"]

#: The changelist actions and the permission each needs (checked before Django's own).
ACTION_PERMISSIONS = {
    "replay_selected": "replay",
    "resolve_selected": "resolve",
    "purge_selected": "purge",
}


#: Characters of an id the admin's list shows (the random tail of a UUIDv7-style id).
SHORT_ID_CHARS = 12


def short_id(record_id: str) -> str:
    """The part of a record id that tells records apart: its random tail."""
    return record_id[-SHORT_ID_CHARS:]


class ReasonFilter(admin.SimpleListFilter):
    """Every reason the library writes, read from ``DeadLetterReason`` when the page is drawn.

    The column has no ``choices``, so a reason added to the library needs no migration.
    """

    title = _("reason")
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(r.value, r.value.replace("_", " ")) for r in DeadLetterReason]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(reason=value) if value else queryset


class ResolvedFilter(admin.SimpleListFilter):
    """Open (the default triage view) or resolved records."""

    title = _("resolved")
    parameter_name = "resolved"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("no", _("Open")), ("yes", _("Resolved"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(resolved_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(resolved_at__isnull=False)
        return queryset


class DeadLetterRecordAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Triage of dead letters (see the module docstring for permissions)."""

    list_display = (
        "short_id",
        "task_or_machine",
        "workflow_instance",
        "reason_label",
        "attempts",
        "last_error_short",
        "age",
        "resolved",
    )
    list_display_links = ("short_id",)
    list_filter = (ReasonFilter, "task_name", "machine_id", ResolvedFilter, "taken_on")
    search_fields = ("id", "task_id", "subject", "error_text")
    date_hierarchy = "taken_on"
    list_per_page = 50
    actions = ("replay_selected", "resolve_selected", "purge_selected")
    readonly_fields = ("workflow_instance",)
    change_form_template = "admin/xsm_celery/deadletterrecord/change_form.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "reason",
                    "machine_id",
                    "state_id",
                    "attempts",
                    "taken_on",
                    "resolved_on",
                )
            },
        ),
        (_("Task"), {"fields": ("task_name", "task_id", "workflow_instance", "hostname")}),
        (_("Envelope"), {"fields": ("topic", "subject"), "classes": ("collapse",)}),
        (_("Chart"), {"fields": ("machine_hash", "machine_version")}),
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("xsm_celery/admin.css",)}

    def operations(self) -> DeadLetterOperations:
        """The operations the views act through; override to inject a store or an app."""
        return DeadLetterOperations(DjangoDeadLetterStore())

    def bulk_replay_limit(self) -> int:
        """Most records one bulk replay may touch (``XSM_CELERY["BULK_REPLAY_LIMIT"]``)."""
        return get_settings().bulk_replay_limit

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        """Whether the user may replay (``xsm_celery.replay_deadletterrecord``)."""
        return _has_perm(request, "xsm_celery.replay_deadletterrecord")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        """Whether the user may purge (``xsm_celery.purge_deadletterrecord``)."""
        return _has_perm(request, "xsm_celery.purge_deadletterrecord")

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        """Whether the user may resolve (``xsm_celery.change_deadletterrecord``)."""
        return _has_perm(request, "xsm_celery.change_deadletterrecord")

    @admin.display(description=_("id"), ordering="id")
    def short_id(self, obj: DeadLetterRecord) -> str:
        """The id's last 12 characters: its random part.

        Ids are UUIDv7-style, so their first characters are only the creation millisecond:
        two dead letters written in the same millisecond would look alike there.
        """
        return short_id(obj.id)

    @admin.display(description=_("reason"), ordering="reason")
    def reason_label(self, obj: DeadLetterRecord) -> str:
        return obj.reason.replace("_", " ")

    @admin.display(description=_("task / machine"), ordering="task_name")
    def task_or_machine(self, obj: DeadLetterRecord) -> str:
        return obj.task_name or obj.machine_id

    @admin.display(description=_("workflow instance"), empty_value="")
    def workflow_instance(self, obj: DeadLetterRecord) -> str:
        """``order[o-42] (task step)``: the workflow instance the record belongs to, if any."""
        owner = workflow_of_record(row_to_record(obj))
        return "" if owner is None else f"{owner} ({owner.part.value})"

    @admin.display(description=_("last error"), ordering="last_error")
    def last_error_short(self, obj: DeadLetterRecord) -> str:
        text = obj.last_error
        return text if len(text) <= 80 else text[:79] + "\u2026"

    @admin.display(description=_("age"), ordering="-taken_at")
    def age(self, obj: DeadLetterRecord) -> str:
        return timesince(obj.taken_on)

    @admin.display(description=_("resolved"), boolean=True, ordering="resolved_at")
    def resolved(self, obj: DeadLetterRecord) -> bool:
        return obj.resolved_at is not None

    @admin.display(description=_("resolved on"))
    def resolved_on(self, obj: DeadLetterRecord) -> str:
        if obj.resolved_at is None:
            return str(_("open"))
        return admin_date(obj.resolved_at)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = f"{self.model._meta.app_label}_{self.model._meta.model_name}"

        def act(view: Any, **fixed: Any) -> Any:
            return wrap(lambda request, **kwargs: view(self, request, **fixed, **kwargs))

        urls = [
            path("bulk-replay/", act(views.bulk_replay_view), name=f"{name}_bulk_replay"),
            path("bulk/<str:action>/", act(views.confirm_view), name=f"{name}_bulk"),
            path("<path:object_id>/replay/", act(views.replay_view), name=f"{name}_replay"),
            path(
                "<path:object_id>/resolve/",
                act(views.confirm_view, action="resolve"),
                name=f"{name}_resolve",
            ),
            path(
                "<path:object_id>/purge/",
                act(views.confirm_view, action="purge"),
                name=f"{name}_purge",
            ),
        ]
        return urls + super().get_urls()

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        found = super().get_actions(request)
        found.pop("delete_selected", None)
        return found

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list; a posted action the user may not run is a 403, not a silent no-op."""
        if request.method == "POST":
            needed = ACTION_PERMISSIONS.get(request.POST.get("action", ""))
            if needed and not getattr(self, f"has_{needed}_permission")(request):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The read-only detail page, with the error chain, JSON, diagram and audit trail."""
        row = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if row is not None:
            extra["xsm"] = self._detail(request, row)
        return super().change_view(request, object_id, form_url, extra)

    def _detail(self, request: HttpRequest, row: DeadLetterRecord) -> dict[str, Any]:
        record = row_to_record(row)
        chart = find_chart(record)
        diagram: SafeString | None = None
        if chart.config is not None:
            # render_chart_svg escapes every text it draws, so the markup is safe as is.
            diagram = mark_safe(render_chart_svg(chart.config, marked=record.state_id))
        return {
            "record": record,
            "errors": record.errors,
            "arguments": {"args": record.task_args, "kwargs": record.task_kwargs},
            "chart": chart,
            "chart_changed": chart.changed_since(record),
            "diagram": diagram,
            "audit": AuditEntry.objects.using(row._state.db or "default")
            .filter(record_id=record.id)
            .order_by("id"),
            "can_replay": self.has_replay_permission(request) and record.resolved_at is None,
            "can_resolve": self.has_resolve_permission(request) and record.resolved_at is None,
            "can_purge": self.has_purge_permission(request),
            "now": time.time(),
        }

    @admin.action(description=_("Replay selected dead letters\u2026"), permissions=["replay"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        limit = self.bulk_replay_limit()
        rows = list(queryset.order_by("taken_at")[: limit + 1])
        if len(rows) > limit:
            self.message_user(
                request,
                _("Select at most %d dead letters to replay at once; narrow the filter.") % limit,
                messages.ERROR,
            )
            return None
        return views.render_bulk_replay(self, request, rows)

    @admin.action(description=_("Resolve selected dead letters\u2026"), permissions=["resolve"])
    def resolve_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> TemplateResponse:
        return self._confirm_many(request, "resolve", queryset)

    @admin.action(description=_("Purge selected dead letters\u2026"), permissions=["purge"])
    def purge_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> TemplateResponse:
        return self._confirm_many(request, "purge", queryset)

    def _confirm_many(
        self, request: HttpRequest, action: str, queryset: QuerySet[Any]
    ) -> TemplateResponse:
        from xsm_celery.django.admin.forms import ReasonForm

        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "app_label": opts.app_label,
            "title": _("%s dead letters") % action.capitalize(),
            "action": action,
            "rows": list(queryset),
            "form": ReasonForm(),
            "single": False,
        }
        return TemplateResponse(request, "admin/xsm_celery/deadletterrecord/confirm.html", context)


def _has_perm(request: HttpRequest, perm: str) -> bool:
    return bool(cast(Any, request.user).has_perm(perm))
