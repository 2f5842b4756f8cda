"""Pages of the admin that are not models, listed among the app's models all the same.

Django lists only registered models on the admin index, the app index and the navigation
sidebar, so an operator would have to know the URL of the status or fleet page. ``add_page``
adds the page's URL before the site's catch-all app URLs and gives ``get_app_list`` a
model-like entry in this app, which Django's templates render like any model row (a "view"
link when read-only, "change" when the user may act on the page), for the users allowed to
open it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path, reverse

__all__ = ["APP_LABEL", "add_page", "allowed"]

#: The label of the app whose index lists the pages.
APP_LABEL = "xsm_celery"


def allowed(request: HttpRequest, perm: str) -> bool:
    """Whether the request's user holds ``perm``."""
    return bool(cast(Any, request.user).has_perm(perm))


def add_page(
    site: Any,
    *,
    route: str,
    url_name: str,
    view: Callable[[HttpRequest], HttpResponse],
    title: Callable[[], str],
    object_name: str,
    view_permission: str,
    change_permission: Callable[[], str] | None = None,
) -> None:
    """Serve ``view`` at ``<admin>/<route>`` and list it in the app for who may view it.

    ``title`` and ``change_permission`` are called per request, so a translated title
    follows the user's language and a permission read from settings follows the settings.
    """
    original_urls = site.get_urls
    original_app_list = site.get_app_list

    def get_urls() -> list[URLPattern | URLResolver]:
        return [path(route, site.admin_view(view), name=url_name), *original_urls()]

    def get_app_list(request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        app_list: list[dict[str, Any]] = original_app_list(request, app_label)
        if not allowed(request, view_permission):
            return app_list
        may_change = change_permission is not None and allowed(request, change_permission())
        entry = {
            "name": title(),
            "object_name": object_name,
            "perms": {"add": False, "change": may_change, "delete": False, "view": True},
            "admin_url": reverse(f"{site.name}:{url_name}", current_app=site.name),
            "add_url": None,
            "view_only": not may_change,
        }
        for app in app_list:
            if app.get("app_label") == APP_LABEL:
                app["models"].append(entry)
                app["models"].sort(key=lambda row: str(row["name"]))
        return app_list

    site.get_urls = get_urls
    site.get_app_list = get_app_list
