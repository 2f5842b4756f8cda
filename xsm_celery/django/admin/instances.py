"""Admin of durable workflow instances: the list, the detail page, and "send event".

The list comes from ``WorkflowInstance`` rows (written in each step's transaction); the detail
page reads the instance's snapshot for the chart diagram (active states marked), the
redacted public context, pending timers and the task steps it waits for, and shows its outbox
rows, recent transitions and operator audit. "Send event" lets an operator unstick an
instance: the event is chosen from those the current state accepts, a dry run shows the
transitions it would take, and the real send needs a reason and is audited. A send that the
inbox answers as a duplicate (the same form submitted twice) is audited as such, not as a send.
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from xsm_celery.charttools.svg import render_chart_svg
from xsm_celery.django.admin.forms import PayloadField, ReasonForm
from xsm_celery.django.charts import resolve_chart
from xsm_celery.django.models import WorkflowInstance, WorkflowTransition
from xsm_celery.ids import new_id

__all__ = ["SEND_EVENT_ACTION", "SEND_EVENT_DUPLICATE", "SendEventForm", "WorkflowInstanceAdmin"]

#: The audit action of an event an operator sent (``send_event_dry_run`` for dry runs).
SEND_EVENT_ACTION = "send_event"

#: The audit action of a send the inbox answered as already applied: nothing changed.
SEND_EVENT_DUPLICATE = "send_event_duplicate"

_TEMPLATES = "admin/xsm_celery/workflowinstance"


class SendEventForm(ReasonForm):
    """The event (one the current state accepts), an optional JSON payload, and why.

    Every key of the payload is the event's data, ``event_id`` included: a Django user reads
    a JSON field as the document it stores, and the chart's actions see exactly that object.
    The id the inbox deduplicates on is the form's own hidden ``send_id``, drawn at the dry
    run; taking it from the payload would let a typed key decide whether the step runs at
    all (an id already applied sends nothing). The same ``send_id`` submitted twice (a
    double click racing past the version check) is one step.
    """

    event = forms.ChoiceField(label=_("Event"), help_text=_("Events the current state accepts."))
    payload = PayloadField(
        label=_("Payload"),
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text=_(
            'A JSON object, for example {"total": 99}; empty for none. Every key, '
            '"event_id" too, is data the event carries.'
        ),
    )
    version = forms.IntegerField(widget=forms.HiddenInput, required=False, label="")
    send_id = forms.CharField(widget=forms.HiddenInput, required=False, label="")

    def __init__(self, *args: Any, events: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["event"]).choices = [(e, e) for e in events]

    def clean_payload(self) -> dict[str, Any]:
        value = self.cleaned_data.get("payload")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError(_("The payload must be a JSON object."))
        from xsm_celery.celery.workflow.checks import check_json
        from xsm_celery.errors import InvalidEventError

        try:
            check_json(value, "payload")
        except InvalidEventError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return value

    def clean_send_id(self) -> str:
        """The dry run's id for this send; refused when it is not one the inbox can keep."""
        from xsm_celery.celery.workflow.checks import check_event_id
        from xsm_celery.errors import InvalidEventError

        value = str(self.cleaned_data.get("send_id") or "")
        if value:
            try:
                check_event_id(value)
            except InvalidEventError as exc:
                raise forms.ValidationError(str(exc)) from exc
        return value


def _audit_id(row: WorkflowInstance) -> str:
    return f"wf:{row.pk}"


def _redact_keys() -> tuple[str, ...]:
    from xsm_celery.engine import DEFAULT_REDACT_KEYS

    return tuple(DEFAULT_REDACT_KEYS)


class WorkflowInstanceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Workflow instances: machine, key, state, status and last update; detail and send event."""

    list_display = ("key", "workflow", "machine_id", "state", "status", "updated")
    list_filter = ("workflow", "status", "machine_id", "state")
    search_fields = ("key", "state")
    date_hierarchy = "updated"
    ordering = ("-updated_at",)
    exclude = ("updated_at",)
    change_form_template = f"{_TEMPLATES}/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_send_permission(self, request: HttpRequest) -> bool:
        """Sending events needs the model's change permission."""
        opts = self.model._meta
        return bool(cast(Any, request.user).has_perm(f"{opts.app_label}.change_{opts.model_name}"))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = f"{self.model._meta.app_label}_{self.model._meta.model_name}"
        view = wrap(self.send_event_view)
        return [
            path("<path:object_id>/send-event/", view, name=f"{name}_send_event"),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The read-only detail page with diagram, context, timers, outbox and transitions."""
        row = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if row is not None:
            extra["xsm"] = self._detail(request, row)
        return super().change_view(request, object_id, form_url, extra)

    def _detail(self, request: HttpRequest, row: WorkflowInstance) -> dict[str, Any]:
        from xsm_celery.django.models import AuditEntry, OutboxMessage

        using = row._state.db or "default"
        flow, view = _instance(row)
        chart = resolve_chart(row.machine_id, workflow=row.workflow)
        diagram: SafeString | None = None
        if chart.config is not None:
            active = view.state_ids if view is not None else row.state.split(", ")
            # render_chart_svg escapes every text it draws, so the markup is safe as is.
            diagram = mark_safe(render_chart_svg(chart.config, marked=active))
        from xsm_celery.engine import redact

        events = flow.accepted_events(row.key) if flow is not None else []
        return {
            "workflow": flow,
            "view": view,
            "diagram": diagram,
            "chart": chart,
            "context": redact(view.context, _redact_keys()) if view is not None else {},
            "outbox": OutboxMessage.objects.using(using)
            .filter(Q(subject=row.store_key) | Q(subject=row.key))
            .order_by("-seq")[:50],
            "transitions": WorkflowTransition.objects.using(using)
            .filter(workflow=row.workflow, key=row.key)
            .order_by("-id")[:50],
            "audit": AuditEntry.objects.using(using)
            .filter(record_id=_audit_id(row))
            .order_by("id"),
            "events": events,
            "can_send": self.has_send_permission(request) and bool(events),
        }

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Choose an event, see its dry run, then send it with a reason (audited)."""
        if not self.has_send_permission(request):
            raise PermissionDenied
        row = self.get_object(request, object_id)
        if row is None:
            raise Http404(f"no workflow instance {object_id}")
        flow, view = _instance(row)
        if flow is None or view is None:
            messages.error(
                request,
                _("This process does not know workflow %s; import the Celery app that declares it.")
                % row.workflow,
            )
            return HttpResponseRedirect(self._change_url(row))
        events = flow.accepted_events(row.key)
        # The version is only filled in by a dry run: "Send now" needs one of the current state.
        form = SendEventForm(request.POST or None, events=events)
        plan: list[str] | None = None
        if request.method == "POST" and form.is_valid():
            event = form.cleaned_data["event"]
            payload = form.cleaned_data["payload"]
            planned_at = form.cleaned_data.get("version")
            # A first dry run has no version yet: only a plan made at another version is stale.
            stale = planned_at is not None and planned_at != view.version
            send_id = form.cleaned_data["send_id"] or new_id()
            if "confirm" in request.POST and planned_at is not None and not stale:
                return self._send(
                    request,
                    row,
                    flow,
                    event=event,
                    payload=payload,
                    reason=form.cleaned_data["reason"],
                    send_id=send_id,
                )
            plan = dry_run(flow, view, event)
            self._audit(
                request,
                row,
                f"{SEND_EVENT_ACTION}_dry_run",
                form.cleaned_data["reason"],
                f"would send {event}: " + "; ".join(plan),
            )
            form = SendEventForm(
                {**request.POST.dict(), "version": view.version, "send_id": send_id},
                events=events,
            )
            form.is_valid()
            if stale and "confirm" in request.POST:
                messages.warning(
                    request,
                    _(
                        "Nothing was sent: the instance moved on since your dry run "
                        "(version %(then)d, now %(now)d). Check the new plan, then send."
                    )
                    % {"then": planned_at, "now": view.version},
                )
            elif stale:
                messages.info(
                    request,
                    _(
                        "The instance moved on since your last dry run; "
                        "this plan is for its new state."
                    ),
                )
            elif "confirm" in request.POST:
                messages.info(request, _("Nothing was sent: check the dry run below, then send."))
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "original": row,
            "app_label": opts.app_label,
            "title": _("Send an event to %s") % row.key,
            "form": form,
            "plan": plan,
            "view": view,
        }
        return TemplateResponse(request, f"{_TEMPLATES}/send_event.html", context)

    def _send(
        self,
        request: HttpRequest,
        row: WorkflowInstance,
        flow: Any,
        *,
        event: str,
        payload: dict[str, Any],
        reason: str,
        send_id: str,
    ) -> HttpResponse:
        """Run the step in this process; the payload travels whole as the event's data."""
        from xsm_celery.celery.workflow.step import Message

        message = Message(send_id, "event", type=event, payload=dict(payload))
        try:
            step = flow.step(row.key, message)
            after = flow.get(row.key)
        except Exception as exc:
            outcome = f"failed: {type(exc).__name__}: {exc}"
            self._audit(request, row, SEND_EVENT_ACTION, reason, outcome)
            messages.error(
                request, _("Sending %(event)s failed: %(error)s") % {"event": event, "error": exc}
            )
            return HttpResponseRedirect(self._change_url(row))
        states = ", ".join(sorted(after.state_ids)) if after is not None else "?"
        if step.outcome == "duplicate":
            outcome = (
                f"duplicate: {event} with id {send_id} was already applied (this form "
                f"was submitted before); nothing changed, still in {states}"
            )
            self._audit(request, row, SEND_EVENT_DUPLICATE, reason, outcome)
            messages.warning(request, outcome)
            return HttpResponseRedirect(self._change_url(row))
        if step.outcome not in ("applied", "started"):
            outcome = f"not applied ({step.outcome}): {event}; nothing changed, still in {states}"
            self._audit(request, row, SEND_EVENT_ACTION, reason, outcome)
            messages.warning(request, outcome)
            return HttpResponseRedirect(self._change_url(row))
        moved = "now in" if step.changed else "no transition was taken (a guard said no); still in"
        outcome = f"sent {event}; {moved} {states}"
        self._audit(request, row, SEND_EVENT_ACTION, reason, outcome)
        messages.success(request, outcome)
        return HttpResponseRedirect(self._change_url(row))

    def _audit(
        self, request: HttpRequest, row: WorkflowInstance, action: str, reason: str, outcome: str
    ) -> None:
        import time

        from xsm_celery.django.models import AuditEntry
        from xsm_celery.django.stores.dates import to_datetime

        now = time.time()
        AuditEntry.objects.using(row._state.db or "default").create(
            record_id=_audit_id(row),
            action=action,
            actor=str(request.user.get_username()) or "anonymous",
            reason=reason,
            outcome=outcome[:2000],
            at=now,
            created=to_datetime(now),
        )

    def _change_url(self, row: WorkflowInstance) -> str:
        opts = self.model._meta
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=[row.pk],
            current_app=self.admin_site.name,
        )


def _instance(row: WorkflowInstance) -> tuple[Any, Any]:
    """The ``Workflow`` of a row (None if this process lacks it) and its current view."""
    from xsm_celery.celery.workflow.api import find_workflow

    flow = find_workflow(row.workflow)
    if flow is not None:
        return flow, flow.get(row.key)
    from xsm_celery.celery.workflow.view import view_of
    from xsm_celery.django.stores import DjangoSnapshotStore

    record = DjangoSnapshotStore(using=row._state.db or None).load(row.store_key)
    return None, None if record is None else view_of(row.workflow, row.key, record)


def dry_run(flow: Any, view: Any, event: str) -> list[str]:
    """The transitions ``event`` could take from the instance's active states (nothing runs)."""
    lines: list[str] = []
    for node in flow.machine.nodes:
        if not view.matches(node.id):
            continue
        for transition in node.on.get(event, ()):
            names = [target.id for target in transition.targets]
            targets = ", ".join(names) or str(_("(stays, runs its actions)"))
            guard = getattr(transition.guard, "name", None) or transition.guard
            lines.append(f"{node.id} -> {targets}" + (f" if {guard}" if guard else ""))
    return lines or [str(_("no transition handles it in the current state"))]
