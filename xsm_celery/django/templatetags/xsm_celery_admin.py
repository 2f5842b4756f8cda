"""Template filters of the admin pages: formatted JSON and epoch-second ages."""

from __future__ import annotations

import json
import time
from typing import Any

from django import template
from django.utils.timesince import timesince

from xsm_celery.django.stores.dates import to_datetime

register = template.Library()

__all__ = ["epoch_age", "epoch_date", "pretty_json", "register"]


@register.filter
def pretty_json(value: Any) -> str:
    """``value`` as indented JSON with sorted keys (autoescaped by the template)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


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
    """An epoch-seconds time as a local date and time, with how far away it is."""
    if value is None:
        return ""
    from django.utils.formats import date_format
    from django.utils.timezone import localtime

    when = date_format(localtime(to_datetime(value)), "DATETIME_FORMAT")
    left = value - time.time()
    if left > 0:
        return f"{when} (in {timesince(to_datetime(time.time()), to_datetime(value))})"
    return f"{when} ({timesince(to_datetime(value))} ago)"
