"""Template filters of the admin pages: formatted JSON, and every date in one format.

The models keep exact epoch seconds beside their indexed date columns; the pages show
neither raw number: every date goes through :func:`admin_date` (the site's
``DATETIME_FORMAT`` in the current time zone, as Django's own columns show dates), and an
age or a time left is said in ``timesince`` words.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from django import template
from django.utils.formats import date_format
from django.utils.timesince import timesince
from django.utils.timezone import is_aware, localtime

from xsm_celery.django.stores.dates import to_datetime

register = template.Library()

__all__ = ["admin_date", "epoch_age", "epoch_date", "pretty_json", "register"]


@register.filter
def pretty_json(value: Any) -> str:
    """``value`` as indented JSON with sorted keys (autoescaped by the template)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def admin_date(value: dt.datetime | float | None) -> str:
    """A date (a datetime or epoch seconds) the way every admin page shows one."""
    if value is None:
        return ""
    when = value if isinstance(value, dt.datetime) else to_datetime(float(value))
    return date_format(localtime(when) if is_aware(when) else when, "DATETIME_FORMAT")


@register.filter
def epoch_age(value: float | None) -> str:
    """How long ago an epoch-seconds time was, as Django's ``timesince`` words."""
    if value is None:
        return ""
    if value > time.time():
        return "in the future"
    return timesince(to_datetime(value))


@register.filter
def epoch_date(value: float | None) -> str:
    """An epoch-seconds time as :func:`admin_date` shows it, with how far away it is."""
    if value is None:
        return ""
    when = admin_date(value)
    if value > time.time():
        return f"{when} (in {timesince(to_datetime(time.time()), to_datetime(value))})"
    return f"{when} ({timesince(to_datetime(value))} ago)"
