"""Redis-backed stores: an inbox and idempotency keys that every process of a fleet shares.

Needs the ``redis`` extra: ``pip install "xsm-celery[redis]"``.
"""

from __future__ import annotations

from xsm_celery.errors import MissingExtraError

try:
    import redis  # noqa: F401
except ImportError as exc:
    raise MissingExtraError(extra="redis", module="redis") from exc

from xsm_celery.redis.idempotency import DEFAULT_IDEMPOTENCY_PREFIX, RedisIdempotencyStore
from xsm_celery.redis.inbox import DEFAULT_PREFIX, RedisInbox

__all__ = [
    "DEFAULT_IDEMPOTENCY_PREFIX",
    "DEFAULT_PREFIX",
    "RedisIdempotencyStore",
    "RedisInbox",
]
