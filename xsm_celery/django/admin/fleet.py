"""The admin page of the fleet's breakers, rate limiters and slot pools.

It lives at ``admin/xsm_celery/fleet/``.

It shows what ``xsm-celery breakers`` shows (both call ``xsm_celery.redis.fleet_ops``), for
the Celery app the admin already uses (``XSM_CELERY["CELERY_APP"]``): its
``xsm_redis_url``, key prefix and ``xsm_breakers``. Any staff user who may view dead letters
sees it read-only; a user with ``XSM_CELERY["FLEET_RESET_PERMISSION"]`` (by default
``xsm_celery.replay_deadletterrecord``: whoever may push work through again) also gets a
reset form, which needs a reason and writes an entry to the dead-letter audit trail.

``register(admin.site)`` adds the page to a site, with an entry among the app's models on
the admin index, the app index and the navigation sidebar (for the users who may open it);
``xsm_celery.django.admin`` does it for the default site.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from xsm_celery.django.admin.pages import add_page, allowed
from xsm_celery.errors import ConfigurationError, XsmError

__all__ = ["URL_NAME", "fleet_view", "register"]

#: The URL name of the page, under the site's namespace (``admin:xsm_celery_fleet``).
URL_NAME = "xsm_celery_fleet"

_VIEW_PERMISSION = "xsm_celery.view_deadletterrecord"


def register(site: Any) -> None:
    """Add the fleet page to an ``AdminSite`` and list it among the app's models.

    Read-only users see a "view" link; users with the reset permission see "change".
    """
    from xsm_celery.django.conf import get_settings

    add_page(
        site,
        route="xsm_celery/fleet/",
        url_name=URL_NAME,
        view=lambda request: fleet_view(site, request),
        title=lambda: _("Fleet breakers and limits"),
        object_name="Fleet",
        view_permission=_VIEW_PERMISSION,
        change_permission=lambda: get_settings().fleet_reset_permission,
    )


def _fleet() -> tuple[Any, dict[str, Any]]:
    from xsm_celery.celery.fleet.plan import fleet_settings
    from xsm_celery.django.admin.celery_app import celery_app
    from xsm_celery.redis.fleet_store import FleetRedis

    settings = fleet_settings(celery_app())
    if settings.redis_url is None:
        raise ConfigurationError(
            "the Celery app has no fleet Redis: set xsm_redis_url (or use a Redis broker)"
        )
    return FleetRedis(settings.redis_url, prefix=settings.prefix), dict(settings.breakers)


def fleet_view(site: Any, request: HttpRequest) -> HttpResponse:
    """List the fleet keys; on POST (with the reset permission) reset one, audited."""
    from xsm_celery.django.conf import get_settings

    if not allowed(request, _VIEW_PERMISSION):
        raise PermissionDenied
    may_reset = allowed(request, get_settings().fleet_reset_permission)
    if request.method == "POST":
        if not may_reset:
            raise PermissionDenied
        _reset(request)
        return HttpResponseRedirect(reverse(f"{site.name}:{URL_NAME}", current_app=site.name))
    rows: list[Any] = []
    error = ""
    try:
        from xsm_celery.redis.fleet_ops import list_fleet

        store, breakers = _fleet()
        rows = list_fleet(store, breakers)
    except XsmError as exc:
        error = str(exc)
    context = {
        **site.each_context(request),
        "title": _("Fleet breakers and limits"),
        "rows": rows,
        "error": error,
        "may_reset": may_reset,
    }
    return TemplateResponse(request, "admin/xsm_celery/fleet/fleet.html", context)


def _reset(request: HttpRequest) -> None:
    from xsm_celery.django.admin.views import actor
    from xsm_celery.django.stores import DjangoDeadLetterStore
    from xsm_celery.redis.fleet_ops import audit_reset, find_key, reset_fleet

    name = str(request.POST.get("name", "")).strip()
    reason = str(request.POST.get("reason", "")).strip()
    if not name or not reason:
        messages.error(request, _("A reset needs the key and a reason (it is audited)."))
        return
    try:
        store, breakers = _fleet()
        key = find_key(store, name)
        outcome = reset_fleet(store, key, breakers)
        audit_reset(
            DjangoDeadLetterStore(), key, actor=actor(request), reason=reason, outcome=outcome
        )
    except XsmError as exc:
        messages.error(request, str(exc))
        return
    messages.success(request, _("Reset %(key)s: %(outcome)s") % {"key": name, "outcome": outcome})
