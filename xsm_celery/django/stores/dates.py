"""Epoch seconds to the datetimes Django columns expect, honouring ``USE_TZ``."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

__all__ = ["to_datetime"]

_MIN = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MAX = dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc)


def to_datetime(epoch_s: float) -> dt.datetime:
    """Convert epoch seconds to an aware (``USE_TZ``) or naive local datetime.

    Stores keep the exact float beside the datetime, so clamping values outside what a
    datetime holds only affects filters and the date hierarchy, never the record.
    """
    try:
        aware = dt.datetime.fromtimestamp(epoch_s, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        aware = _MIN if epoch_s < 0 else _MAX
    if settings.USE_TZ:
        return aware
    return timezone.make_naive(aware, timezone.get_default_timezone())
