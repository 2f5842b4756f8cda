"""The admin's status page: the same figures as ``xsm-celery status``, from the Django stores.

Registered on an admin site with ``register_status_page(site)`` (``admin.py`` does it for
the default site), it lives at ``<admin>/xsm_celery/status/`` and needs the permission to
view dead letters. It reads the Django stores of ``XSM_CELERY["DATABASE"]`` and the fleet
breakers and limiters of the configured Celery app from its Redis; with ``?workers=1`` it
also asks the running workers for their process-local breakers (a remote-control round
trip, so it is not done on every view).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from xsm_celery.django.admin.pages import add_page, allowed
from xsm_celery.metrics.figures import Figures, Sources, read_figures

__all__ = ["STATUS_PERMISSION", "URL_NAME", "register_status_page", "status_sources", "status_view"]

#: The URL name of the page, under the site's namespace (``admin:xsm_celery_status``).
URL_NAME = "xsm_celery_status"

#: Who may see the page.
STATUS_PERMISSION = "xsm_celery.view_deadletterrecord"


def status_sources(*, ask_workers: bool = False) -> Sources:
    """The Django stores of the configured database, and the workers when asked."""
    from xsm_celery.django.stores import (
        DjangoDeadLetterStore,
        DjangoOutboxStore,
        DjangoSnapshotStore,
        DjangoTimerStore,
    )

    workers = None
    if ask_workers:
        from xsm_celery.celery.worker.status import worker_states
        from xsm_celery.django.admin.celery_app import celery_app

        app = celery_app()
        workers = lambda: worker_states(app)  # noqa: E731
    return Sources(
        dead_letters=DjangoDeadLetterStore(),
        outbox=DjangoOutboxStore(),
        timers=DjangoTimerStore(),
        instances=DjangoSnapshotStore(),
        workers=workers,
        fleet=_fleet_states,
    )


def _fleet_states() -> list[Any]:
    """The fleet's breakers and limiters, read from its Redis now (as ``xsm status`` does)."""
    from xsm_celery.celery.worker.status import fleet_states
    from xsm_celery.django.admin.celery_app import celery_app

    read = fleet_states(celery_app())
    return [] if read is None else read()


def _rows(figures: Figures) -> list[tuple[str, int, int]]:
    windows = figures.dead_letters or {}
    hour, day = windows.get("1h", {}), windows.get("24h", {})
    return [(r, hour.get(r, 0), day.get(r, 0)) for r in sorted(set(hour) | set(day))]


def status_view(request: HttpRequest, site: Any) -> HttpResponse:
    """Render the status page for ``site``."""
    if not allowed(request, STATUS_PERMISSION):
        raise PermissionDenied
    ask = request.GET.get("workers") == "1"
    figures = read_figures(status_sources(ask_workers=ask))
    context = {
        **site.each_context(request),
        "title": _("xsm_celery status"),
        "figures": figures,
        "dead_letter_rows": _rows(figures),
        "asked_workers": ask,
    }
    return TemplateResponse(request, "admin/xsm_celery/status.html", context)


def register_status_page(site: Any) -> None:
    """Serve the status page at ``<admin>/xsm_celery/status/`` and list it in the app."""
    add_page(
        site,
        route="xsm_celery/status/",
        url_name=URL_NAME,
        view=lambda request: status_view(request, site),
        title=lambda: _("Status"),
        object_name="Status",
        view_permission=STATUS_PERMISSION,
    )
