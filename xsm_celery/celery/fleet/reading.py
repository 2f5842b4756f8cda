"""Read an app's fleet state for a status or a scrape: every breaker, bucket and slot pool, now.

``fleet_reader`` opens the fleet Redis an app's settings name (the same ``fleet_settings``
a worker uses) and returns a function that lists the fleet (``redis.fleet_ops.list_fleet``,
as ``xsm-celery breakers`` and the admin fleet page do), with each row computed at the read:
a bucket refilled to Redis' clock, an elapsed cooldown applied. The status reply, the
``/metrics`` collector and the admin status page all read through it, so they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xsm_celery.celery.fleet.plan import fleet_settings

__all__ = ["fleet_reader"]


def fleet_reader(app: Any) -> Callable[[], list[Any]] | None:
    """A function returning ``app``'s fleet rows (``FleetRow``) now; None without a fleet Redis.

    The connection is opened at the first read and kept.

    Raises:
        ConfigurationError: A fleet setting has the wrong type or range.
    """
    settings = fleet_settings(app)
    if settings.redis_url is None:
        return None
    url, prefix, breakers = settings.redis_url, settings.prefix, dict(settings.breakers)
    opened: list[Any] = []

    def read() -> list[Any]:
        from xsm_celery.redis.fleet_ops import list_fleet
        from xsm_celery.redis.fleet_store import FleetRedis

        if not opened:
            opened.append(FleetRedis(url, prefix=prefix))
        return list(list_fleet(opened[0], breakers))

    return read
