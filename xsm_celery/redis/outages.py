"""Which redis-py errors mean "Redis is down" rather than "Redis refused the command".

A connection refused, a timeout, a server still loading its data or a replica that became
read-only during a failover will pass: the caller retries later without counting it. A
``ResponseError`` such as ``invalid expire time`` or a wrong type is the value refused, which
retrying does not change, so it must not be mistaken for an outage.
"""

from __future__ import annotations

import redis

from xsm_celery.errors import StoreError, StoreUnavailableError

__all__ = ["redis_store_error"]

_OUTAGE_TYPES: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
)


def redis_store_error(message: str, exc: BaseException) -> StoreError:
    """``StoreUnavailableError`` for an outage of Redis, ``StoreError`` for a refusal."""
    if isinstance(exc, _OUTAGE_TYPES):
        return StoreUnavailableError(f"{message}; it is retried when Redis is back")
    return StoreError(f"{message}; Redis refused the command, retrying will not help")
