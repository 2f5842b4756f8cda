"""Redis-backed stores: an inbox that every consumer process of a fleet shares.

Needs the ``redis`` extra: ``pip install "xsm-celery[redis]"``.
"""

from __future__ import annotations

from xsm_celery import errors as _errors

try:
    import redis  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="redis", module="redis") from exc

from xsm_celery.redis.inbox import DEFAULT_PREFIX, RedisInbox

__all__ = ["DEFAULT_PREFIX", "RedisInbox"]
