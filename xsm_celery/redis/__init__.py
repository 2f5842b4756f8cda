"""Redis-backed stores shared by a fleet: the inbox, idempotency keys, attempt markers, and the
fleet's limits and breakers.

Needs the ``redis`` extra: ``pip install "xsm-celery[redis]"``.
"""

from __future__ import annotations

from xsm_celery import errors as _errors

try:
    import redis  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="redis", module="redis") from exc

from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.concurrency import AimdParams, RedisSlots
from xsm_celery.redis.fleet_store import DEFAULT_FLEET_PREFIX, FleetKey, FleetRedis
from xsm_celery.redis.idempotency import DEFAULT_IDEMPOTENCY_PREFIX, RedisIdempotencyStore
from xsm_celery.redis.inbox import DEFAULT_PREFIX, RedisInbox
from xsm_celery.redis.limit_backends import (
    RedisBreakerStateBackend,
    RedisConcurrencyBackend,
    RedisRateLimitBackend,
)
from xsm_celery.redis.markers import RedisAttemptMarkers
from xsm_celery.redis.rate_limit import RedisSlidingWindow, RedisTokenBucket

__all__ = [
    "DEFAULT_IDEMPOTENCY_PREFIX",
    "DEFAULT_PREFIX",
    "RedisAttemptMarkers",
    "RedisIdempotencyStore",
    "RedisInbox",
    # Fleet-wide limits and breakers
    "DEFAULT_FLEET_PREFIX",
    "AimdParams",
    "FleetBreaker",
    "FleetKey",
    "FleetRedis",
    "RedisBreakerStateBackend",
    "RedisConcurrencyBackend",
    "RedisRateLimitBackend",
    "RedisSlidingWindow",
    "RedisSlots",
    "RedisTokenBucket",
]
