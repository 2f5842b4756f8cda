"""The admin's operator pages: replay (dry run, then confirm), resolve, purge, bulk replay.

Each view checks its own permission and answers 403 without it, whatever the method, so
a read-only operator cannot act by posting a form by hand. Each is wrapped by
``admin_site.admin_view`` (login and CSRF) in ``DeadLetterRecordAdmin.get_urls``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from xsm_celery.django.admin.forms import ReasonForm, ReplayForm
from xsm_celery.django.operations import DeadLetterOperations, ReplayOutcome
from xsm_celery.django.stores.dead_letters import row_to_record


class TriageAdmin(Protocol):
    """What these pages need of the dead-letter admin that routes to them.

    A Protocol rather than the admin class itself: the admin imports these views to build its
    URLs, so the views name only the members they use.
    """

    model: Any
    admin_site: Any

    def operations(self) -> DeadLetterOperations: ...
    def bulk_replay_limit(self) -> int: ...
    def get_object(self, request: HttpRequest, object_id: str) -> Any: ...
    def get_queryset(self, request: HttpRequest) -> Any: ...
    def has_replay_permission(self, request: HttpRequest) -> bool: ...
    def has_resolve_permission(self, request: HttpRequest) -> bool: ...
    def has_purge_permission(self, request: HttpRequest) -> bool: ...


__all__ = ["bulk_replay_view", "confirm_view", "render_bulk_replay", "replay_view"]

_TEMPLATES = "admin/xsm_celery/deadletterrecord"


def actor(request: HttpRequest) -> str:
    """The audit name of the operator making the request."""
    return str(request.user.get_username()) or "anonymous"


def operations_for(admin: TriageAdmin) -> DeadLetterOperations:
    """The operations object the admin acts through (one store per request)."""
    return admin.operations()


def _context(admin: TriageAdmin, request: HttpRequest, **extra: Any) -> dict[str, Any]:
    opts = admin.model._meta
    return {
        **admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        **extra,
    }


def _change_url(admin: TriageAdmin, record_id: str) -> str:
    opts = admin.model._meta
    return reverse(
        f"admin:{opts.app_label}_{opts.model_name}_change",
        args=[record_id],
        current_app=admin.admin_site.name,
    )


def _changelist_url(admin: TriageAdmin) -> str:
    opts = admin.model._meta
    return reverse(
        f"admin:{opts.app_label}_{opts.model_name}_changelist", current_app=admin.admin_site.name
    )


def replay_view(admin: TriageAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """GET: the dry run and the confirmation form. POST: replay with the given reason."""
    if not admin.has_replay_permission(request):
        raise PermissionDenied
    row = admin.get_object(request, object_id)
    if row is None:
        raise Http404(f"no dead letter with id {object_id!r}")
    ops = operations_for(admin)
    form = ReplayForm(request.POST or None, for_task=bool(row.task_name))
    if request.method == "POST" and form.is_valid():
        outcome = ops.replay(
            row.pk,
            actor=actor(request),
            reason=form.cleaned_data["reason"],
            force=bool(form.cleaned_data.get("force")),
        )
        _report(request, outcome)
        return HttpResponseRedirect(_change_url(admin, row.pk))
    plan = ops.plan(row_to_record(row))
    context = _context(
        admin, request, title=_("Replay dead letter"), original=row, plan=plan, form=form
    )
    return TemplateResponse(request, f"{_TEMPLATES}/replay.html", context)


def _report(request: HttpRequest, outcome: ReplayOutcome) -> None:
    if outcome.ok:
        messages.success(request, _("Replayed: %(detail)s") % {"detail": outcome.detail})
    else:
        messages.error(
            request,
            _("Replay %(status)s: %(detail)s")
            % {"status": outcome.status, "detail": outcome.detail},
        )


def confirm_view(
    admin: TriageAdmin, request: HttpRequest, action: str, object_id: str | None = None
) -> HttpResponse:
    """Resolve or purge one record (``object_id``) or the posted ``ids``, with a reason."""
    allowed = {"resolve": admin.has_resolve_permission, "purge": admin.has_purge_permission}
    if action not in allowed:
        raise Http404(f"unknown action {action!r}")
    if not allowed[action](request):
        raise PermissionDenied
    ids = [object_id] if object_id else request.POST.getlist("ids")
    rows = list(admin.get_queryset(request).filter(pk__in=ids))
    if not rows:
        raise Http404("no such dead letter")
    form = ReasonForm(request.POST if "reason" in request.POST else None)
    if form.is_valid():
        ops = operations_for(admin)
        act = ops.resolve if action == "resolve" else ops.purge
        done = sum(
            act(row.pk, actor=actor(request), reason=form.cleaned_data["reason"]) for row in rows
        )
        messages.success(
            request,
            _("%(action)s: %(done)d of %(total)d dead letter(s).")
            % {"action": action.capitalize(), "done": done, "total": len(rows)},
        )
        if action == "resolve" and object_id:
            return HttpResponseRedirect(_change_url(admin, object_id))
        return HttpResponseRedirect(_changelist_url(admin))
    context = _context(
        admin,
        request,
        title=_("%s dead letters") % action.capitalize(),
        action=action,
        rows=rows,
        form=form,
        single=bool(object_id),
    )
    return TemplateResponse(request, f"{_TEMPLATES}/confirm.html", context)


def render_bulk_replay(
    admin: TriageAdmin, request: HttpRequest, rows: list[Any], form: ReplayForm | None = None
) -> HttpResponse:
    """The bulk replay page for the selected rows: each record's dry run, then the form."""
    ops = operations_for(admin)
    plans = [ops.plan(row_to_record(row)) for row in rows]
    context = _context(
        admin,
        request,
        title=_("Replay %d dead letters") % len(rows),
        plans=plans,
        form=form or ReplayForm(),
        results=None,
    )
    return TemplateResponse(request, f"{_TEMPLATES}/bulk_replay.html", context)


def bulk_replay_view(admin: TriageAdmin, request: HttpRequest) -> HttpResponse:
    """Replay the posted ``ids``: one at a time as JSON (the progress bar), or all at once."""
    if not admin.has_replay_permission(request):
        raise PermissionDenied
    if request.method != "POST":
        return HttpResponseRedirect(_changelist_url(admin))
    ids = request.POST.getlist("ids")
    limit = admin.bulk_replay_limit()
    form = ReplayForm(request.POST)
    if not ids or len(ids) > limit or not form.is_valid():
        if request.POST.get("format") == "json":
            return JsonResponse(
                {"error": _("a reason (and at most %d ids) is needed") % limit}, status=400
            )
        rows = list(admin.get_queryset(request).filter(pk__in=ids)[:limit])
        return render_bulk_replay(admin, request, rows, form)
    ops = operations_for(admin)
    outcomes = [
        ops.replay(
            record_id,
            actor=actor(request),
            reason=form.cleaned_data["reason"],
            force=form.cleaned_data["force"],
        )
        for record_id in ids
    ]
    if request.POST.get("format") == "json":
        return JsonResponse({"results": [_outcome_json(o) for o in outcomes]})
    summary = sorted(Counter(o.status for o in outcomes).items())
    context = _context(
        admin,
        request,
        title=_("Bulk replay: summary"),
        plans=[],
        form=None,
        results=outcomes,
        summary=summary,
    )
    return TemplateResponse(request, f"{_TEMPLATES}/bulk_replay.html", context)


def _outcome_json(outcome: ReplayOutcome) -> dict[str, Any]:
    return {
        "record_id": outcome.record_id,
        "status": outcome.status,
        "ok": outcome.ok,
        "detail": outcome.detail,
        "task_id": outcome.task_id,
    }
